"""The job's pieces on one node (module_utils/job.py): the launch script bash really runs,
the unit systemd would read, the state judged from what a node shows, the torchrun agent
found among real processes."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nodeprep import job

SPEC: dict[str, Any] = {
    "name": "pretrain", "user": "train", "run_dir": "/data/jobs/pretrain", "nnodes": "1:2",
    "nproc_per_node": 8, "max_restarts": 3, "rdzv_host": "10.0.0.11", "rdzv_port": 29400,
    "shutdown_timeout_s": 120, "command": ["-m", "nodeprep.trainer", "--steps", "10"],
    "env": {"NCCL_DEBUG": "WARN", "ODD": "a b'c"}, "nodes": ["n1", "n2"], "image": "/i.sif",
}  # fmt: skip


def test_torchrun_has_the_rendezvous_restarts_and_grace() -> None:
    argv = job.torchrun_argv(SPEC)
    assert argv[:3] == ["python3", "-m", "torch.distributed.run"]
    flat = " ".join(argv)
    assert "--nnodes 1:2 --nproc-per-node 8 --max-restarts 3" in flat
    assert "--rdzv-backend c10d --rdzv-endpoint 10.0.0.11:29400 --rdzv-id nodeprep-pretrain" in flat
    assert "--shutdown-timeout 120" in flat
    assert argv[-4:] == ["-m", "nodeprep.trainer", "--steps", "10"]
    assert job.endpoint({**SPEC, "rdzv_host": "fd00::1"}) == "[fd00::1]:29400"
    assert "--rdzv-conf" not in argv  # the node's address unknown: torchrun guesses


def test_the_node_whose_address_is_the_endpoint_hosts_the_store() -> None:
    first = job.torchrun_argv({**SPEC, "local_addr": "10.0.0.11"})
    other = job.torchrun_argv({**SPEC, "local_addr": "10.0.0.12"})
    assert " ".join(first).count("--local-addr 10.0.0.11 --rdzv-conf is_host=true") == 1
    assert "--rdzv-conf is_host=false" in " ".join(other)
    assert job.rdzv_is_host({**SPEC, "rdzv_host": "[fd00::1]", "local_addr": "fd00::1"})


def test_launcher_is_apptainer_exec_unless_one_is_given() -> None:
    argv = job.launcher("/i.sif", ["--no-privs"], True, ["/data/jobs/x", "/run/nodeprep"], None)
    assert argv == ["apptainer", "exec", "--nv", "--no-privs", "--bind", "/data/jobs/x",
                    "--bind", "/run/nodeprep", "/i.sif"]  # fmt: skip
    assert job.launcher("/i.sif", [], False, [], ["env"]) == ["env"]


@pytest.mark.parametrize(("value", "expected"), [("2", (2, 2)), ("1:4", (1, 4)), (" 3 ", (3, 3))])
def test_nnodes(value: str, expected: tuple[int, int]) -> None:
    assert job.parse_nnodes(value) == expected


def test_launch_script_runs_tees_and_records_the_exit(tmp_path: Path) -> None:
    """bash runs the script: the environment arrives quoted, output reaches the log, and
    exit.json holds the command's own status (not tee's)."""
    spec = {**SPEC, "run_dir": str(tmp_path)}
    probe = [sys.executable, "-c",
             "import os, sys; print('env', os.environ['ODD']); sys.exit(7)"]  # fmt: skip
    script = tmp_path / "launch.sh"
    script.write_text(job.launch_script(spec, probe))
    done = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 7, done.stderr
    log = (tmp_path / "train.log").read_text()
    assert "env a b'c" in log
    assert "nodeprep: job pretrain starting (boot " in log
    assert "nodeprep: job pretrain exited 7" in log
    record = json.loads((tmp_path / "exit.json").read_text())
    assert record["exit_code"] == 7
    assert abs(record["time"] - time.time()) < 60


def test_the_unit_recreates_the_session_and_never_kills_it() -> None:
    start = job.tmux_start_argv("/usr/bin/tmux", "pretrain", "/data/jobs/pretrain/launch.sh")
    text = job.unit_text(SPEC, start)
    assert "User=train\n" in text
    assert "KillMode=process\n" in text
    assert "RequiresMountsFor=/data/jobs/pretrain\n" in text
    assert "ConditionPathExists=!/data/jobs/pretrain/stop.json\n" in text
    assert ("ExecStart=/usr/bin/tmux new-session -d -s pretrain -x 200 -y 50 "
            "/data/jobs/pretrain/launch.sh \\; set-option -w -t =pretrain: remain-on-exit "
            "failed\n") in text  # fmt: skip
    assert "WantedBy=multi-user.target" in text
    assert "ExecStop=/bin/bash /data/jobs/pretrain/shutdown.sh\n" in text
    assert "TimeoutStopSec=180\n" in text  # the shutdown grace and a minute


AGENT = """#!/bin/bash
# A stand-in torchrun agent: with a third argument, it starts a nested one through a shell
# that is no agent (as apptainer's processes hold the torchrun inside the image) and records
# the nested one's PID there.
if [ -n "$3" ]; then bash -c 'bash "$0" "$1" "$2" & echo $! > "$3"; wait' "$0" "$1" "$2" "$3" & fi
while :; do sleep 0.1; done
"""


@pytest.mark.parametrize("system", ["running", "stopping"])
def test_the_unit_stops_torchrun_only_when_the_node_shuts_down(tmp_path: Path, system: str) -> None:
    """shutdown.sh as bash runs it: a stand-in `systemctl` (first on PATH) says whether the
    system is stopping; real processes of this test stand in for the agents: the job's
    (its rendezvous id on the command line, holding a nested one), another job's, and a
    process that is no agent. Only at a shutdown does SIGTERM reach the job's outermost
    agent, and only it; the script returns once it has exited."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\necho {system}\n")
    (bin_dir / "systemctl").chmod(0o755)
    script = tmp_path / "shutdown.sh"
    script.write_text(job.shutdown_script(SPEC))
    (tmp_path / "torchrun").write_text(AGENT)
    nested_pid = tmp_path / "nested.pid"
    agent = subprocess.Popen(["bash", str(tmp_path / "torchrun"), "--rdzv-id",
                              "nodeprep-pretrain", str(nested_pid)])  # fmt: skip
    other_job = subprocess.Popen(["bash", str(tmp_path / "torchrun"), "--rdzv-id",
                                  "nodeprep-pretrain2"])  # fmt: skip
    other = subprocess.Popen(["sleep", "60"])
    reaper = threading.Thread(target=agent.wait)  # as its launch.sh would: no zombie left
    reaper.start()
    nested = 0
    try:
        for _ in range(100):
            if nested_pid.is_file() and nested_pid.read_text().strip():
                break
            time.sleep(0.05)
        nested = int(nested_pid.read_text())
        began = time.monotonic()
        done = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, timeout=30, check=False,
            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        if system == "stopping":
            reaper.join(timeout=5)
            assert agent.returncode == -15
            assert (
                done.stdout
                == f"nodeprep: the node is shutting down: SIGTERM to torchrun {agent.pid}\n"
            )
        else:
            assert agent.poll() is None
            assert done.stdout == ""
        assert Path(f"/proc/{nested}").exists()  # the outermost passes it on; not signalled here
        assert other_job.poll() is None
        assert other.poll() is None
        assert time.monotonic() - began < 20
    finally:
        for proc in (agent, other_job, other):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        reaper.join()
        if nested:
            with contextlib.suppress(ProcessLookupError):
                os.kill(nested, 9)


RUN, NOTHING = {"restarting": False}, {}


@pytest.mark.parametrize(
    ("shown", "state"),
    [
        ((True, False, None, None, None, RUN, True), job.RUNNING),
        ((True, False, None, None, None, {"restarting": True}, True), job.RESTARTING),
        ((True, True, 1, {"exit_code": 1}, None, NOTHING, True), job.FAILED),
        ((True, True, None, {"exit_code": 0}, None, NOTHING, True), job.FINISHED),
        ((False, False, None, {"exit_code": 0}, None, NOTHING, True), job.FINISHED),
        ((True, True, 3, None, None, NOTHING, True), job.FAILED),  # no exit.json: tmux's status
        ((True, True, 1, {"exit_code": 1}, {"time": 1}, NOTHING, True), job.STOPPED),
        ((False, False, None, None, None, NOTHING, True), job.FAILED),  # vanished mid-run
        ((False, False, None, None, None, NOTHING, False), job.ABSENT),
    ],
)
def test_state(shown: tuple[Any, ...], state: str) -> None:
    assert job.judge_state(*shown) == state


def test_log_facts_and_tail(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    lines = ["start step=0 resumed=False", "step 1 loss=2.0 t=1", "step 2 loss=1.9 t=2",
             "failed (exitcode: -9) local_rank: 1", "Restarting worker group"]  # fmt: skip
    log.write_text("\n".join(lines) + "\n")
    tail = job.log_tail(str(log), 3)
    assert tail == lines[-3:]
    assert job.log_facts(job.log_tail(str(log))) == {"step": 2, "done": False, "restarting": True}
    log.write_text("\n".join([*lines, "start step=2 resumed=True", "done step=9 state_sha256=ab"]))
    assert job.log_facts(job.log_tail(str(log))) == {"step": 9, "done": True, "restarting": False}
    assert job.log_tail(str(tmp_path / "none")) == []


def test_the_agent_is_found_below_the_pane(tmp_path: Path) -> None:
    """A real process tree: bash (the pane) -> a python that calls itself torch.distributed.run
    -> its child. The agent is the one `stop` signals; nothing else is touched."""
    ready = tmp_path / "ready"
    agent_code = (
        "import subprocess, sys, pathlib, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"pathlib.Path({str(ready)!r}).write_text(str(c.pid)); time.sleep(60)"
    )
    pane = subprocess.Popen(
        ["bash", "-c", f'exec {sys.executable} -c "$0" -m torch.distributed.run',
         agent_code],
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        # The file exists before its pid is written: wait for the pid itself.
        while not (ready.exists() and ready.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(ready.read_text())
        assert set(job.descendants(pane.pid)) == {child}
        assert job.agents(os.getpid()) == [pane.pid]
        assert job.agents(pane.pid) == []
    finally:
        for pid in [*job.descendants(pane.pid), pane.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        pane.wait(timeout=10)


def test_replay_reruns_the_reference_trainer_to_a_step_unpaced_on_a_standalone_rendezvous() -> None:
    spec = {**SPEC, "command": ["-m", "nodeprep.trainer", "--run-dir", "/data/jobs/pretrain",
                                "--steps", "100000", "--checkpoint-every", "10",
                                "--min-step-s", "0.5", "--seed=4", "--drill-nan-at", "30",
                                "--state-hash-out=/data/h.txt"]}  # fmt: skip
    prefix = ["apptainer", "exec", "--bind", "/data/jobs/pretrain", "/i.sif"]
    argv = prefix + job.torchrun_argv(spec)
    replay = job.replay_argv(argv, 2, "/data/jobs/pretrain/replay", 170)
    assert replay == [
        *prefix, "python3", "-m", "torch.distributed.run", "--standalone",
        "--nproc-per-node", "2", "-m", "nodeprep.trainer", "--steps", "100000",
        "--checkpoint-every", "10", "--seed=4", "--run-dir", "/data/jobs/pretrain/replay",
        "--until-step", "170",
    ]  # fmt: skip
    # Not the reference trainer, or not under torchrun: nothing to replay.
    assert job.replay_argv(prefix + job.torchrun_argv({**SPEC, "command": ["train.py"]}),
                           1, "/r", 5) is None  # fmt: skip
    assert job.replay_argv(["python3", "-m", "nodeprep.trainer"], 1, "/r", 5) is None
    said = "start step=170 resumed=True\nstep 170 loss=1\ndone step=170 state_sha256=" + "ab" * 32
    assert job.replay_facts(said) == {"start": 170, "resumed": True, "done": 170,
                                      "sha256": "ab" * 32}  # fmt: skip
    assert job.replay_facts("start step=0 resumed=False\nstep 1 loss=2\n") is None  # no end


def test_a_file_written_after_the_read_began_is_not_older_than_zero(tmp_path: Path) -> None:
    """status takes its clock first and reads the log later: a line written in between makes
    the log's mtime later than that clock (seen on the lab: "-1.2s ago")."""
    log = tmp_path / "train.log"
    log.write_text("step 1\n")
    began = time.time()
    os.utime(log, (began + 1.5, began + 1.5))
    assert job.age(str(log), began) == 0.0
    assert job.age(str(log), began + 3.0) == 1.5
    assert job.age(str(tmp_path / "absent"), began) is None
