"""Regression tests of the hosts, ports and inventories that once ran (issue 19, items 5-9)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeprep import inventory, runner
from nodeprep.cli import cli

TWO_HOSTS = "[nodes]\nh1 ansible_host=127.0.0.1\nh2 ansible_host=127.0.0.1\n"


def run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), prog_name="nodeprep")
    return result.exit_code, result.output


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(("limit", "part"), [("~[(", "'('"), ("~host[12", "'~host', '12'")])
def test_malformed_limit_runs_nowhere(
    limit: str, part: str, tmp_path: Path, runs: list[runner.RunRequest], ssh_calls: Path
) -> None:
    inv = write(tmp_path, "inv.ini", TWO_HOSTS)
    code, out = run_cli("provision", str(inv), "--check", "-l", limit)
    assert code == 2
    assert f"--limit {limit!r}" in out
    assert part in out
    assert runs == []
    assert not ssh_calls.exists()


def test_good_patterns_still_select(tmp_path: Path, runs: list[runner.RunRequest]) -> None:
    inv = write(tmp_path, "inv.ini", TWO_HOSTS)
    assert run_cli("provision", str(inv), "-l", "nodes:!h1", "--list-hosts") == (0, "h2\n")
    assert run_cli("provision", str(inv), "-l", "~h[12]", "--list-hosts") == (0, "h1\nh2\n")
    assert run_cli("provision", str(inv), "-l", "h1,h2", "--list-hosts") == (0, "h1\nh2\n")


def test_parse_error_after_a_host_refuses_the_file(
    tmp_path: Path, runs: list[runner.RunRequest], ssh_calls: Path
) -> None:
    inv = write(tmp_path, "p.ini", "h1 ansible_host=127.0.0.2 ansible_port=2222\n[broken\n")
    for args in (["--list-hosts"], []):
        code, out = run_cli("provision", str(inv), *args)
        assert code == 2
        assert f"inventory {inv}:2: '[broken' is not a section header" in out
    assert runs == []
    assert not ssh_calls.exists()


def test_random_bytes_are_not_an_inventory(tmp_path: Path, runs: list[runner.RunRequest]) -> None:
    inv = tmp_path / "random.ini"
    inv.write_bytes(b"h1\n\xc0\x80 junk\n")
    code, out = run_cli("provision", str(inv), "--list-hosts")
    assert code == 2
    assert f"inventory {inv}:2 is not UTF-8 text (byte 0xc0)" in out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[n]\nh1:99999\n", "host h1: ansible_port=99999 is not a TCP port"),
        ("[n]\nh1:notaport\n", "host h1:notaport: the host name (no ansible_host is set) is not"),
        ("[n]\nh1 ansible_host=127.0.0.1 ansible_port=abc\n", "ansible_port='abc' is not a TCP"),
        ("[n]\nh1 ansible_host=-oProxyCommand=x\n", "ansible_host='-oProxyCommand=x' is not"),
        ("[n]\nh1 ansible_host=127.0.0.1\n[n:vars]\nansible_port=0\n", "ansible_port=0 is not"),
    ],
)
def test_bad_ports_and_addresses_never_reach_ssh(
    text: str, expected: str, tmp_path: Path, runs: list[runner.RunRequest], ssh_calls: Path
) -> None:
    inv = write(tmp_path, "ports.ini", text)
    code, out = run_cli("provision", str(inv))
    assert code == 2
    assert expected in out
    assert runs == []
    assert not ssh_calls.exists()


def test_yaml_negative_port(tmp_path: Path, runs: list[runner.RunRequest]) -> None:
    inv = write(tmp_path, "p.yml", "all:\n  hosts:\n    y1:\n      ansible_port: -5\n")
    code, out = run_cli("verify", str(inv))
    assert code == 2
    assert "host y1: ansible_port=-5 is not a TCP port; use a number from 1 to 65535." in out


def test_usable_connection_values_pass(tmp_path: Path) -> None:
    inv = write(
        tmp_path,
        "ok.ini",
        "[n]\nh1 ansible_host=::1 ansible_port=2222\nh2 ansible_host=node-2.example\n"
        "h3 ansible_port='{{ lookup_port }}' ansible_host=127.0.0.3\n"
        "weird:name ansible_connection=local\n[n:vars]\nansible_port=22\n",
    )
    loaded = inventory.load(inv)
    assert loaded.selected == ("h1", "h2", "h3", "weird:name")


def test_extra_vars_file_not_utf8_or_a_directory(
    tmp_path: Path, runs: list[runner.RunRequest]
) -> None:
    inv = write(tmp_path, "inv.ini", TWO_HOSTS)
    bad = tmp_path / "bad.yml"
    bad.write_bytes(b"a: 1\nb: \xff\n")
    for command in ("provision", "verify"):
        code, out = run_cli(command, str(inv), "-e", f"@{bad}")
        assert (code, out.count("\n")) == (2, 1)
        assert f"-e @{bad}:2 is not UTF-8 text (byte 0xff)" in out
        code, out = run_cli(command, str(inv), "-e", f"@{tmp_path}")
        assert code == 2
        assert f"-e @{tmp_path} is a directory" in out
    assert runs == []


def test_click_errors_read_like_ours(tmp_path: Path, runs: list[runner.RunRequest]) -> None:
    inv = write(tmp_path, "inv.ini", TWO_HOSTS)
    code, out = run_cli("provision", str(inv), "-e", "justaword")
    assert code == 2
    assert out == (
        "nodeprep: error: -e 'justaword' is not KEY=VALUE, inline JSON/YAML or @FILE; write it "
        "like -e preflight_min_free_gb=20 (see 'nodeprep provision --help').\n"
    )
    code, out = run_cli("verify", str(inv), "--timeout", "0")
    assert code == 2
    assert out.startswith("nodeprep: error: Invalid value for '--timeout'")
    assert out.count("\n") == 1


@pytest.mark.parametrize("kind", ["fifo", "range", "long-name", "alias-bomb"])
def test_hostile_inventories_are_refused_within_a_second(
    kind: str, tmp_path: Path, runs: list[runner.RunRequest]
) -> None:
    path = tmp_path / ("inv.yml" if kind == "alias-bomb" else "inv.ini")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "range":
        path.write_text("[n]\nh[0000000:9999999]\n")
    elif kind == "long-name":
        path.write_text("h" * (2 << 20) + "\n")
    else:
        levels = [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 10)]
        path.write_text("l0: &l0 [x, x, x, x, x, x, x, x, x]\n" + "\n".join(levels) + "\n")
    started = time.monotonic()
    code, out = run_cli("provision", str(path), "--list-hosts")
    assert time.monotonic() - started < 1.0
    assert code == 2
    assert str(path) in out
    assert runs == []
