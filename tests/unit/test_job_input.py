"""`nodeprep run / status / stop`: bad input is one sentence, exit 2, no playbook, no ssh;
a node's refusal (nodeprep_refused) is exit 2 as well; good input builds the request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodeprep import runner
from nodeprep.cli import cli


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--name", "a:b"], "--name 'a:b' is not a job name"),
        (["--name", "-x"], "is not a job name"),
        (["--name", "x" * 49], "is not a job name"),
        (["--name", "ok", "--nnodes", "3"], "--nnodes 3 does not match the 2 selected node(s)"),
        (["--name", "ok", "--nnodes", "3:4"], "does not match the 2 selected node(s)"),
        (["--name", "ok", "--nnodes", "4:2"], "has MIN above MAX"),
        (["--name", "ok", "--nnodes", "two"], "is not N or MIN:MAX"),
        (["--name", "ok", "--nnodes", "0:2"], "is not N or MIN:MAX"),
        (["--name", "ok", "--image", "trainer.sif"], "--image 'trainer.sif' is not an absolute"),
        (["--name", "ok", "--image-sha256", "abc"], "is not 64 lowercase hex digits"),
        (["--name", "ok", "--run-dir", "jobs/x"], "--run-dir 'jobs/x' is not an absolute path"),
        (["--name", "ok", "-l", "nosuch"], "nosuch"),
        (["--name", "ok", "-e", "job_nproc_per_node=many"], "job_nproc_per_node"),
        (["--name", "ok", "-e", "job_nv=sometimes"], "job_nv"),
        (["--name", "ok", "-e", "job_start_at_boot=perhaps"], "job_start_at_boot"),
    ],
)
def test_run_refuses_bad_input_before_any_node(
    runs: list[runner.RunRequest], ssh_calls: Path, fleet: Path, args: list[str], expected: str
) -> None:
    code, out = invoke("run", str(fleet), *args)
    assert code == 2, out
    assert expected in out, out
    assert "Traceback" not in out
    assert len(out.strip().splitlines()) <= 3, out  # one sentence (wrapped at most)
    assert runs == []
    assert not ssh_calls.exists()


@pytest.mark.parametrize("command", ["status", "stop"])
def test_status_and_stop_refuse_a_bad_name(
    runs: list[runner.RunRequest], ssh_calls: Path, fleet: Path, command: str
) -> None:
    code, out = invoke(command, str(fleet), "--name", "a b")
    assert code == 2
    assert "is not a job name" in out
    assert runs == []
    assert not ssh_calls.exists()
    code, out = invoke(command, str(fleet))
    assert code == 2
    assert "--name" in out


def test_stop_timeout_must_be_positive(runs: list[runner.RunRequest], fleet: Path) -> None:
    code, out = invoke("stop", str(fleet), "--name", "x", "--timeout", "0")
    assert code == 2
    assert "--timeout" in out
    assert runs == []


def test_good_run_builds_one_request(runs: list[runner.RunRequest], fleet: Path) -> None:
    code, out = invoke(
        "run", str(fleet), "--name", "pretrain", "--nnodes", "1:4", "--nproc-per-node", "8",
        "--max-restarts", "5", "--image", "/opt/t.sif", "--", "train.py", "--lr", "3e-4",
    )  # fmt: skip
    assert code == 0, out
    (request,) = runs
    assert request.playbook.name == "job.yml"
    given = request.extra_vars
    assert given["nodeprep_job_action"] == "run"
    assert given["job_name"] == "pretrain"
    assert given["job_nnodes"] == "1:4"
    assert given["job_nproc_per_node"] == 8
    assert given["job_max_restarts"] == 5
    assert given["job_image"] == "/opt/t.sif"
    assert given["job_command"] == ["train.py", "--lr", "3e-4"]
    assert "job_run_dir" not in given  # the role's default: job_run_root/NAME


def test_default_nnodes_is_the_selected_node_count(
    runs: list[runner.RunRequest], fleet: Path
) -> None:
    code, out = invoke("run", str(fleet), "--name", "x", "-l", "gpu02")
    assert code == 0, out
    assert runs[0].extra_vars["job_nnodes"] == "1"
    assert "job_command" not in runs[0].extra_vars  # the reference trainer


def _result(jobs: list[dict[str, Any]], failures: list[runner.TaskFailure]) -> runner.RunResult:
    return runner.RunResult(
        status="failed" if failures else "successful", rc=2 if failures else 0,
        recap={}, failures=failures, jobs=jobs,
    )  # fmt: skip


def test_a_node_refusal_is_exit_2_and_named(monkeypatch: pytest.MonkeyPatch, fleet: Path) -> None:
    said = "job x is already running on gpu01 (tmux session x of train); stop it first."
    refused = runner.TaskFailure("gpu01", "Refuse", "job", said, refused=True)
    monkeypatch.setattr(runner, "run", lambda request, on_progress=None: _result([], [refused]))
    code, out = invoke("run", str(fleet), "--name", "x")
    assert code == 2
    assert "gpu01: refused: job x is already running on gpu01" in out


def test_status_exit_code_follows_the_states(monkeypatch: pytest.MonkeyPatch, fleet: Path) -> None:
    def answer(states: dict[str, str]) -> None:
        jobs = [{"host": h, "state": s, "session": True, "step": 7, "tail": ["boom"]}
                for h, s in states.items()]  # fmt: skip
        monkeypatch.setattr(runner, "run", lambda request, on_progress=None: _result(jobs, []))

    answer({"gpu01": "running", "gpu02": "finished"})
    code, out = invoke("status", str(fleet), "--name", "x")
    assert code == 0, out
    answer({"gpu01": "running", "gpu02": "failed"})
    code, out = invoke("status", str(fleet), "--name", "x")
    assert code == 1
    assert "gpu02: last lines of" in out
    assert "boom" in out
    answer({"gpu01": "running"})  # gpu02 answered nothing
    code, out = invoke("status", str(fleet), "--name", "x")
    assert code == 1
    assert "unknown" in out


def test_stop_names_nodes_left_running(monkeypatch: pytest.MonkeyPatch, fleet: Path) -> None:
    jobs = [
        {"host": "gpu01", "state": "stopped", "still_running": False, "signal": "SIGTERM",
         "stop_seconds": 4.2, "emergency": {"step": 40, "signal": "SIGTERM",
                                            "signal_time": 1.0, "committed_time": 1.5}},
        {"host": "gpu02", "state": "running", "still_running": True},
    ]  # fmt: skip
    monkeypatch.setattr(runner, "run", lambda request, on_progress=None: _result(jobs, []))
    code, out = invoke("stop", str(fleet), "--name", "x", "--timeout", "30")
    assert code == 1
    assert "gpu02: still running after 30 s; left running" in out
    assert "gpu01: stopped (SIGTERM after 4.2 s); emergency save: 40 on SIGTERM in 0.50s" in out


def test_the_runner_keeps_job_payloads_and_refusals() -> None:
    collector = runner._EventCollector(None)
    collector({"event": "playbook_on_play_start", "event_data": {"name": "p"}})
    collector(
        {
            "event": "runner_on_failed",
            "event_data": {
                "host": "gpu01",
                "task": "t",
                "res": {
                    "msg": "no",
                    "nodeprep_refused": True,
                    "nodeprep_job": {"host": "gpu01.local"},
                },
            },
        }
    )
    collector({"event": "runner_on_ok", "event_data": {
        "host": "gpu02", "task": "t", "res": {"nodeprep_job": {"state": "running"}}}})  # fmt: skip
    assert [f.refused for f in collector.failures] == [True]
    assert collector.jobs == [{"host": "gpu01"}, {"state": "running", "host": "gpu02"}]
