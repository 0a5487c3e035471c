"""Every malformed inventory, -e value and --limit of the corpus: exit 2, one line, fast.

The corpus lives beside this file (``corpus/``, ``extra_vars.txt``, ``limits.txt``,
``vars/``); the cases that cannot be checked in (a FIFO, a directory, a 2 MiB line)
are made here. For each: exit code 2, one ``nodeprep: error:`` line and no
traceback, no playbook run, no ssh call, and an answer in under two seconds.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeprep import runner
from nodeprep.cli import cli

HERE = Path(__file__).parent
CORPUS = sorted((HERE / "corpus").iterdir())
GOOD = "[nodes]\nh1 ansible_host=127.0.0.1\nh2 ansible_host=127.0.0.1\n"


def _lines(name: str) -> list[str]:
    text = (HERE / name).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line and not line.startswith("#")]


@pytest.fixture
def good_inventory(tmp_path: Path) -> Path:
    path = tmp_path / "good.ini"
    path.write_text(GOOD)
    return path


def refused_quickly(args: list[str], runs: list[runner.RunRequest], ssh_log: Path) -> str:
    started = time.monotonic()
    result = CliRunner().invoke(cli, args, prog_name="nodeprep")
    seconds = time.monotonic() - started
    out = result.output
    assert result.exit_code == 2, out
    assert out.startswith("nodeprep: error: "), out
    assert out.count("\n") == 1, out
    assert "Traceback" not in out
    assert runs == []
    assert not ssh_log.exists(), ssh_log.read_text()
    assert seconds < 2.0, f"{args}: {seconds:.2f} s"
    return out


@pytest.mark.parametrize("command", ["provision", "verify"])
@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_malformed_inventory(
    command: str, path: Path, runs: list[runner.RunRequest], ssh_calls: Path
) -> None:
    out = refused_quickly([command, str(path)], runs, ssh_calls)
    assert path.name in out


@pytest.mark.parametrize("kind", ["fifo", "directory", "long-line", "many-hosts"])
def test_inventory_that_cannot_be_checked_in(
    kind: str, tmp_path: Path, runs: list[runner.RunRequest], ssh_calls: Path
) -> None:
    path = tmp_path / f"{kind}.ini"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "long-line":
        path.write_text("h" * (2 << 20) + "\n")
    else:
        path.write_text("\n".join(f"n{i}" for i in range(50_001)) + "\n")
    out = refused_quickly(["provision", str(path), "--list-hosts"], runs, ssh_calls)
    assert str(path) in out


@pytest.mark.parametrize("value", _lines("extra_vars.txt"))
def test_malformed_extra_vars(
    value: str, good_inventory: Path, runs: list[runner.RunRequest], ssh_calls: Path
) -> None:
    if value.startswith("@") and not value.startswith("@/"):
        value = f"@{HERE / 'vars' / value[1:]}"
    for command in ("provision", "verify"):
        refused_quickly([command, str(good_inventory), "-e", value], runs, ssh_calls)


@pytest.mark.parametrize("value", _lines("limits.txt"))
def test_limit_that_selects_nothing_or_does_not_parse(
    value: str, good_inventory: Path, runs: list[runner.RunRequest], ssh_calls: Path
) -> None:
    limit = "" if value == "<empty>" else value
    for args in (["provision", "--check"], ["verify"]):
        out = refused_quickly([*args, str(good_inventory), "-l", limit], runs, ssh_calls)
        assert "--limit" in out


@pytest.mark.parametrize("option", [["-f", "0"], ["--forks", "x"], ["--json", "/"], ["--bogus"]])
def test_click_errors_are_one_line(
    option: list[str], good_inventory: Path, runs: list[runner.RunRequest], ssh_calls: Path
) -> None:
    out = refused_quickly(["provision", str(good_inventory), *option], runs, ssh_calls)
    assert "nodeprep provision --help" in out


def test_verify_timeout_error_is_one_line(
    good_inventory: Path, runs: list[runner.RunRequest], ssh_calls: Path
) -> None:
    out = refused_quickly(["verify", str(good_inventory), "--timeout", "x"], runs, ssh_calls)
    assert "--timeout" in out
