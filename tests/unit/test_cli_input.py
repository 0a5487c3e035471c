"""Bad input never reaches Ansible: one sentence naming the input, exit 2, nothing run."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeprep import runner
from nodeprep.cli import cli


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_help_lists_commands_and_examples() -> None:
    code, out = invoke("--help")
    assert code == 0
    assert "provision" in out
    code, out = invoke("provision", "--help")
    assert code == 0
    assert "Examples:" in out
    assert "--check" in out


def test_missing_inventory(runs: list[runner.RunRequest], tmp_path: Path) -> None:
    code, out = invoke("provision", str(tmp_path / "missing.ini"))
    assert code == 2
    assert f"inventory {tmp_path / 'missing.ini'} does not exist" in out
    assert "Traceback" not in out
    assert runs == []


def test_unparsable_inventory_names_file_and_line(
    runs: list[runner.RunRequest], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.ini"
    bad.write_text("[nodes]\nnode1 ansible_host=127.0.0.1\n[nodes:vars]\nnot_a_pair\n")
    code, out = invoke("provision", str(bad))
    assert code == 2
    assert f"inventory {bad}:4 could not be parsed" in out
    assert "not_a_pair" in out
    assert runs == []


def test_unparsable_yaml_inventory(runs: list[runner.RunRequest], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("all:\n  hosts:\n    a: [1,\n")
    code, out = invoke("provision", str(bad))
    assert code == 2
    assert f"inventory {bad} could not be parsed" in out
    assert runs == []


def test_inventory_without_hosts(runs: list[runner.RunRequest], tmp_path: Path) -> None:
    empty = tmp_path / "empty.ini"
    empty.write_text("[nodes]\n")
    code, out = invoke("provision", str(empty))
    assert code == 2
    assert "defines no hosts" in out
    assert runs == []


def test_unknown_limit(runs: list[runner.RunRequest], local_inventory: Path) -> None:
    code, out = invoke("provision", str(local_inventory), "--limit", "gpu99")
    assert code == 2
    assert "--limit 'gpu99' matches no host" in out
    assert runs == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("justaword", "is not KEY=VALUE"),
        ("@/nonexistent/vars.yml", "-e @/nonexistent/vars.yml does not exist"),
        ("{not: [closed", "is not valid JSON or YAML"),
    ],
)
def test_malformed_extra_vars(
    runs: list[runner.RunRequest], local_inventory: Path, value: str, expected: str
) -> None:
    code, out = invoke("provision", str(local_inventory), "-e", value)
    assert code == 2
    assert expected in out
    assert runs == []


def test_extra_vars_file_that_is_not_a_mapping(
    runs: list[runner.RunRequest], local_inventory: Path, tmp_path: Path
) -> None:
    listing = tmp_path / "vars.yml"
    listing.write_text("- a\n- b\n")
    code, out = invoke("provision", str(local_inventory), "-e", f"@{listing}")
    assert code == 2
    assert "must be a mapping" in out
    assert runs == []


def test_good_input_builds_the_request(
    runs: list[runner.RunRequest], local_inventory: Path, tmp_path: Path
) -> None:
    extra = tmp_path / "vars.json"
    extra.write_text('{"preflight_min_free_gb": 3}')
    code, _ = invoke(
        "provision",
        str(local_inventory),
        "--check",
        "--diff",
        "-t",
        "a,b",
        "--skip-tags",
        "c",
        "-f",
        "7",
        "-l",
        "nodes",
        "-e",
        "x=1 y=two",
        "-e",
        f"@{extra}",
    )
    assert code == 0
    (request,) = runs
    assert request.check
    assert request.diff
    assert request.tags == ("a", "b")
    assert request.skip_tags == ("c",)
    assert request.forks == 7
    assert request.limit == "nodes"
    assert request.extra_vars == {
        "x": "1",
        "y": "two",
        "preflight_min_free_gb": 3,
        "nodeprep_rollout_serial": [1, "10%", "100%"],
        "nodeprep_rollout_canary": "",
        "nodeprep_rollout_bonds": False,
    }
    assert request.playbook.name == "provision.yml"
    assert request.playbook.is_file()


@pytest.mark.parametrize(
    ("args", "bonds"),
    [
        ((), True),  # node1's inventory line asks for a bond
        (("-l", "node2"), False),  # the selected host has none
        (("-e", '{"nic_bond_members": []}'), False),  # -e wins over the inventory
        (("-l", "node2", "-e", '{"nic_bond_members": ["ens4"]}'), True),
    ],
    ids=["inventory", "limit", "e-none", "e-bond"],
)
def test_rollout_knows_whether_a_selected_host_has_a_bond(
    runs: list[runner.RunRequest], tmp_path: Path, args: tuple[str, ...], bonds: bool
) -> None:
    """What decides that the rollout play runs under the linear strategy (provision.yml)."""
    fleet = tmp_path / "fleet.ini"
    fleet.write_text(
        'node1 ansible_connection=local nic_bond_members=\'["ens4", "ens5"]\'\n'
        "node2 ansible_connection=local\n"
    )
    code, out = invoke("provision", str(fleet), "--fast", *args)
    assert code == 0, out
    assert runs[0].extra_vars["nodeprep_rollout_bonds"] is bonds


def test_list_hosts_runs_nothing(runs: list[runner.RunRequest], local_inventory: Path) -> None:
    code, out = invoke("provision", str(local_inventory), "--list-hosts")
    assert code == 0
    assert out.strip() == "localhost"
    assert runs == []


@pytest.mark.parametrize("command", ["provision", "verify"])
def test_fast_without_mitogen_is_refused(
    command: str,
    runs: list[runner.RunRequest],
    local_inventory: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner.importlib.util, "find_spec", lambda name: None)
    code, out = invoke(command, str(local_inventory), "--fast")
    assert code == 2
    assert "--fast needs the mitogen package" in out
    assert runs == []


def test_verify_fast_selects_mitogen(runs: list[runner.RunRequest], local_inventory: Path) -> None:
    _, out = invoke("verify", str(local_inventory), "--fast", "--checks", "disk")
    assert len(runs) == 1, out
    assert runs[0].fast
    _, out = invoke("verify", str(local_inventory), "--checks", "disk")
    assert not runs[1].fast, out


def test_extra_vars_are_split_as_ansible_splits_them(
    runs: list[runner.RunRequest], local_inventory: Path
) -> None:
    code, out = invoke("provision", str(local_inventory), "-e", "msg=\"hello world\" n='a b' k=v=w")
    assert code == 0, out
    assert {k: runs[0].extra_vars[k] for k in ("msg", "n", "k")} == {
        "msg": "hello world",
        "n": "a b",
        "k": "v=w",
    }
    code, out = invoke("provision", str(local_inventory), "-e", 'msg="unclosed')
    assert code == 2
    assert "is not KEY=VALUE" in out
