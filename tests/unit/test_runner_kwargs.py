"""The runner's keyword arguments are plain data built from the request."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from rich.console import Console

from nodeprep import paths, runner
from nodeprep.cli import progress


def test_minimal_request(tmp_path: Path) -> None:
    request = runner.RunRequest(
        playbook=paths.playbook("provision.yml"), inventory=tmp_path / "inv.ini"
    )
    kwargs = runner.build_runner_kwargs(request, tmp_path / "private")
    assert kwargs["playbook"] == str(paths.playbook("provision.yml"))
    assert kwargs["inventory"] == str((tmp_path / "inv.ini").resolve())
    assert kwargs["private_data_dir"] == str(tmp_path / "private")
    assert kwargs["envvars"]["ANSIBLE_CONFIG"] == str(paths.ansible_cfg())
    assert kwargs["envvars"]["ANSIBLE_ROLES_PATH"] == str(paths.roles_dir())
    # The collection comes from the run's private directory (run() links it there).
    collections = tmp_path / "private" / runner.COLLECTIONS_SUBDIR
    assert kwargs["envvars"]["ANSIBLE_COLLECTIONS_PATH"] == str(collections)
    assert not collections.exists()  # building the kwargs has no side effects
    assert kwargs["envvars"]["PATH"].startswith(str(Path(sys.executable).parent))
    for absent in ("limit", "tags", "skip_tags", "forks", "cmdline", "passwords"):
        assert absent not in kwargs


def test_full_request(tmp_path: Path) -> None:
    request = runner.RunRequest(
        playbook=paths.playbook("provision.yml"),
        inventory=tmp_path / "inv.ini",
        limit="gpu*",
        tags=("preflight", "tmux"),
        skip_tags=("nic_bond",),
        check=True,
        diff=True,
        forks=12,
        extra_vars={"a": 1},
        verbosity=2,
    )
    kwargs = runner.build_runner_kwargs(request, tmp_path)
    assert kwargs["limit"] == "gpu*"
    assert kwargs["tags"] == "preflight,tmux"
    assert kwargs["skip_tags"] == "nic_bond"
    assert kwargs["forks"] == 12
    assert kwargs["cmdline"] == "--check --diff"
    assert kwargs["extravars"] == {"a": 1}
    assert kwargs["verbosity"] == 2


def test_connection_options_reach_ansible_playbook_as_it_names_them(tmp_path: Path) -> None:
    key = tmp_path / "my keys" / "fleet.pem"
    connection = runner.Connection(
        user="ubuntu", private_key=key, become=True, ask_become_pass=True,
        vault_password_file=tmp_path / "vault.txt",
        passwords={runner.BECOME_PROMPT: "s3cret"},
    )  # fmt: skip
    request = runner.RunRequest(
        playbook=paths.playbook("verify.yml"), inventory=tmp_path / "inv.ini",
        check=True, connection=connection,
    )  # fmt: skip
    kwargs = runner.build_runner_kwargs(request, tmp_path, tmp_path / "run.cfg")
    assert shlex.split(kwargs["cmdline"]) == [
        "--check", "--user", "ubuntu", "--private-key", str(key), "--become",
        "--ask-become-pass", "--vault-password-file", str(tmp_path / "vault.txt"),
    ]  # fmt: skip
    assert kwargs["passwords"] == {runner.BECOME_PROMPT: "s3cret"}
    assert kwargs["envvars"]["ANSIBLE_CONFIG"] == str(tmp_path / "run.cfg")
    assert "s3cret" not in repr(connection)


def test_exit_code_mapping() -> None:
    ok = runner.RunResult("successful", 0, {"a": runner.HostRecap(ok=3)}, [])
    assert ok.exit_code == 0
    failed = runner.RunResult(
        "failed", 2, {"a": runner.HostRecap(failed=1)}, [runner.TaskFailure("a", "t", "r", "boom")]
    )
    assert failed.exit_code == 1
    dark = runner.RunResult(
        "failed", 4, {"a": runner.HostRecap(unreachable=1), "b": runner.HostRecap(failed=1)}, []
    )
    assert dark.exit_code == 3
    assert dark.unreachable_hosts == ["a"]


def test_events_become_progress_recap_and_failures() -> None:
    seen: list[runner.Progress] = []
    collect = runner._EventCollector(seen.append)
    events = [
        {"event": "playbook_on_task_start", "event_data": {"task": "T1", "role": "r"}},
        {
            "event": "runner_on_ok",
            "event_data": {"host": "n1", "task": "T1", "role": "r", "res": {"changed": True}},
        },
        {
            "event": "runner_on_failed",
            "event_data": {
                "host": "n2",
                "task": "T1",
                "role": "r",
                "res": {"msg": "disk too small"},
            },
        },
        {
            "event": "runner_on_failed",
            "event_data": {
                "host": "n3",
                "task": "T1",
                "role": "r",
                "ignore_errors": True,
                "res": {},
            },
        },
        {
            "event": "playbook_on_stats",
            "event_data": {
                "ok": {"n1": 1},
                "changed": {"n1": 1},
                "failures": {"n2": 1},
                "dark": {},
            },
        },
    ]
    for event in events:
        assert collect(event)
    assert [p.outcome for p in seen] == [None, "changed", "failed", "ok"]
    assert collect.failures == [runner.TaskFailure("n2", "T1", "r", "disk too small")]
    assert collect.recap["n1"].changed == 1
    assert collect.recap["n2"].failed == 1
    assert collect.changes == [runner.TaskChange("n1", "T1", "r")]


def test_the_recap_names_each_changed_task_per_host() -> None:
    result = runner.RunResult(
        "successful",
        0,
        {"n1": runner.HostRecap(ok=3, changed=2), "n2": runner.HostRecap(ok=3)},
        [],
        changes=[runner.TaskChange("n1", "Write the config.", "heartbeat"),
                 runner.TaskChange("n1", "Restart it.", "")],
    )  # fmt: skip
    console = Console(record=True, width=200)
    progress.print_recap(console, result)
    text = console.export_text()
    assert "CHANGED n1 (2): heartbeat : Write the config.; Restart it." in text
    assert "CHANGED n2" not in text


def test_fast_selects_the_mitogen_strategy(tmp_path: Path) -> None:
    request = runner.RunRequest(playbook=tmp_path / "p.yml", inventory=tmp_path / "i", fast=True)
    env = runner.build_runner_kwargs(request, tmp_path)["envvars"]
    assert env["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert (Path(env["ANSIBLE_STRATEGY_PLUGINS"]) / "mitogen_linear.py").is_file()


def test_fast_without_mitogen_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(runner.FastModeUnavailable, match=r"pip install 'nodeprep\[mitogen\]'"):
        runner.mitogen_env()
