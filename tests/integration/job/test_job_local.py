"""`nodeprep run / status / stop` on this machine (local connection), two ranks under a real
torchrun in a real tmux session: a rank SIGKILLed is restarted by torchrun and resumes; a
second `run` of a running job, a missing image and too little free space are refused
(exit 2, nothing started); `stop` makes every rank save and exit; `run` again resumes from
that save and ends with the same state hash as the uninterrupted job of the same size.

No image here (Apptainer is the lab's): job_launcher puts this venv's python first on PATH.
tmux runs on a private socket (job_tmux is a wrapper), so no tmux server of the user is
touched, and the test ends that server and every process under it, by pid."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeprep import job
from ports import reserved_port

pytestmark = pytest.mark.timeout(600)
STEPS = 1000
PACE_S = 0.04  # the faulted job's steps: long enough to outlive the faults
NODEPREP = str(Path(sys.executable).with_name("nodeprep"))
HASH = re.compile(r"^done step=(\d+) state_sha256=([0-9a-f]{64})$", re.M)


class Local:
    """The inventory, variables and tmux socket of one test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = f"nodeprep-test-{os.getpid()}"
        self.tmux = root / "tmux"
        self.tmux.write_text(f'#!/bin/sh\nexec tmux -L {self.socket} "$@"\n')
        self.tmux.chmod(0o755)
        self.inventory = root / "local.ini"
        self.inventory.write_text(
            f"[nodes]\nlocalhost ansible_connection=local "
            f"ansible_python_interpreter={sys.executable}\n"
        )
        self.vars = root / "vars.json"
        self.vars.write_text(json.dumps({
            "job_launcher": ["env", f"PATH={Path(sys.executable).parent}:/usr/bin:/bin"],
            "job_start_at_boot": False, "job_run_root": str(root / "jobs"),
            "job_user": "root" if os.geteuid() == 0 else os.environ.get("USER", "root"),
            "job_min_free_mb": 1, "job_registry_dir": str(root / "run" / "trainers"),
            "job_tmux": str(self.tmux), "job_rdzv_port": reserved_port(),
            "job_env": {"GLOO_SOCKET_IFNAME": "lo", "PYTHONWARNINGS": "ignore"},
        }))  # fmt: skip

    def cli(self, *args: str) -> tuple[int, str]:
        done = subprocess.run(
            [NODEPREP, *args[:1], str(self.inventory), *args[1:3], "-e", f"@{self.vars}",
             *args[3:]],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        return done.returncode, done.stdout + done.stderr

    def status(self, name: str) -> tuple[int, dict[str, Any]]:
        out = self.root / f"status-{name}.json"
        code, text = self.cli("status", "--name", name, "--json", str(out))
        assert out.exists(), text
        return code, json.loads(out.read_text())["hosts"]["localhost"]

    def log(self, name: str) -> str:
        path = self.root / "jobs" / name / "train.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def panes(self) -> list[int]:
        done = subprocess.run(
            [str(self.tmux), "list-panes", "-a", "-F", "#{pane_pid}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []

    def end(self) -> None:
        """Every process under this test's tmux server, then the server, by pid."""
        for pane in self.panes():
            for pid in [*job.descendants(pane), pane]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        subprocess.run([str(self.tmux), "kill-server"], capture_output=True, check=False)


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Local]:
    made = Local(tmp_path)
    try:
        yield made
    finally:
        made.end()


def wait_log(local: Local, name: str, pattern: str, count: int = 1, timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = local.log(name)
        if len(re.findall(pattern, text, re.M)) >= count:
            return text
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} x{count} not in {name}'s log: {local.log(name)[-3000:]}")


def command(local: Local, name: str, paced: bool = False) -> list[str]:
    """The reference trainer's command; pacing (--min-step-s) leaves its state unchanged."""
    return ["--", "-m", "nodeprep.trainer", "--run-dir", str(local.root / "jobs" / name),
            "--steps", str(STEPS), "--checkpoint-every", "20", "--model-mb", "0.25",
            "--seed", "5", "--threads", "1", "--device", "cpu",
            *(["--min-step-s", str(PACE_S)] if paced else [])]  # fmt: skip


def ranks(name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            argv = job.cmdline(int(entry))
            if "nodeprep.trainer" in argv and name in " ".join(argv):
                found.append(int(entry))
    return sorted(found)


def test_run_kill_refuse_stop_and_resume_bit_exact(local: Local) -> None:
    first_step, restart = a_killed_rank_is_restarted(local)
    refusals_start_nothing(local)
    saved = stop_saves_and_ends_every_rank(local)

    # run again, unpaced: it resumes from the emergency save and finishes. Beside it, the
    # uninterrupted job of the same world size (two ranks) on its own rendezvous port.
    code, out = local.cli("run", "--name", "j", "--nproc-per-node", "2", *command(local, "j"))
    assert code == 0, out
    port = f"job_rdzv_port={reserved_port()}"
    code, out = local.cli("run", "--name", "ref", "--nproc-per-node", "2", "-e", port,
                          *command(local, "ref"))  # fmt: skip
    assert code == 0, out
    text = wait_log(local, "j", HASH.pattern)
    assert f"start step={saved} resumed=True" in text
    final, reference = HASH.search(text), HASH.search(wait_log(local, "ref", HASH.pattern))
    assert final is not None
    assert reference is not None
    assert final.groups() == reference.groups()
    for name in ("j", "ref"):
        # the hash line comes before the ranks and torchrun exit: wait for the job to end
        deadline = time.monotonic() + 60
        code, seen = local.status(name)
        while seen["state"] in ("running", "restarting") and time.monotonic() < deadline:
            time.sleep(1)
            code, seen = local.status(name)
        assert code == 0
        assert seen["state"] == "finished", seen
    print(f"run to first step {first_step:.1f} s, SIGKILL to resumed {restart:.1f} s")


def test_a_drill_of_its_own_job_ends_with_a_bit_exact_replay(local: Local) -> None:
    """`nodeprep drill` without --name: its own paced reference-trainer job, a rank SIGKILLed,
    the job stopped (every rank saves), then replayed on the node: the run resumed from its
    save and a fresh run to the same step end in the same state."""
    report = local.root / "own.json"
    code, out = local.cli("drill", "--faults", "kill", "--json", str(report))
    assert code == 0, out
    found = json.loads(report.read_text())
    (kill,) = found["drills"]
    assert kill["passed"] is True, kill
    final = found["final_state"]
    assert final["bit_exact"] is True, final
    assert final["job_sha256"] == final["uninterrupted_sha256"], final
    run_dir = local.root / "jobs" / found["job"]
    saves = [json.loads(line) for line in (run_dir / "emergency.jsonl").read_text().splitlines()]
    assert saves[-1]["signal"] == "SIGTERM", saves  # the drill's stop
    assert final["step"] == saves[-1]["step"], (final, saves)
    assert f"final state: the job's state at step {final['step']} equals" in out, out
    assert not (run_dir / "replay").exists()  # the fresh run's directory went
    assert ranks(str(run_dir)) == []
    print(f"own job: kill {json.dumps({k: kill[k] for k in ('steps_lost', 'next_step_s')})}, "
          f"replay {json.dumps(final)}")  # fmt: skip


def a_killed_rank_is_restarted(local: Local) -> tuple[float, float]:
    """Started; a rank SIGKILLed after 100 steps; torchrun restarts the group, which resumes."""
    began = time.monotonic()
    code, out = local.cli("run", "--name", "j", "--nproc-per-node", "2",
                          *command(local, "j", paced=True))  # fmt: skip
    assert code == 0, out
    assert "job j running in tmux session j" in out, out
    record = json.loads((local.root / "jobs" / "j" / "job.json").read_text())
    assert record["env"]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert record["env"]["NODEPREP_COLLECTIVE_TIMEOUT_S"] == "120"
    assert record["rdzv_id"] == "nodeprep-j"
    wait_log(local, "j", r"^step 1 ")
    first_step = time.monotonic() - began
    wait_log(local, "j", r"^step 100 ")
    # The kill drill: one rank SIGKILLed at a step; torchrun restarts the group, which
    # resumes from the newest checkpoint (every 20 steps), so at most 20 steps are lost.
    report = local.root / "drill.json"
    code, out = local.cli("drill", "--name", "j", "--faults", "kill", "--json", str(report))
    assert code == 0, out
    (found,) = json.loads(report.read_text())["drills"]
    assert found["passed"] is True, found
    assert found["detected_by"] == "torchrun", found
    assert found["resumed_from"] % 20 == 0, found
    assert found["resumed_from"] >= 100, found
    assert 0 <= found["steps_lost"] <= found["steps_lost_limit"] == 20, found
    assert found["step_at_fault"] - found["steps_lost"] == found["resumed_from"], found
    assert 0 < found["detect_s"] < found["next_step_s"], found
    restart = found["next_step_s"]
    text = wait_log(local, "j", r"^start step=\d+ resumed=True")
    assert "failed (exitcode: -9)" in text
    # A fault that cannot apply here is refused by the node, naming why; nothing changes.
    code, out = local.cli("drill", "--name", "j", "--faults", "link", "--yes")
    assert code == 2, out
    assert "no bond with two members up" in out, out
    code, seen = local.status("j")
    assert code == 0, seen
    assert seen["state"] in ("running", "restarting"), seen
    assert seen["session"] is True
    return first_step, restart


def refusals_start_nothing(local: Local) -> None:
    """While j runs: j again, too little free space, a missing image, an address not the
    node's; nothing starts."""
    before = ranks("/jobs/j")
    code, out = local.cli("run", "--name", "j", *command(local, "j"))
    assert code == 2, out
    assert "job j is already running on" in out, out
    code, out = local.cli("run", "--name", "other", "-e", "job_min_free_mb=100000000",
                          *command(local, "other"))  # fmt: skip
    assert code == 2, out
    assert "MiB free, under the 100000000 MiB minimum" in out, out
    code, out = local.cli("run", "--name", "other", "-e", '{"job_launcher": []}',
                          "--image", "/nonexistent/trainer.sif")  # fmt: skip
    assert code == 2, out
    assert "image /nonexistent/trainer.sif is missing on" in out, out
    # An address no interface of the node holds (TEST-NET-1: nothing is sent to it).
    code, out = local.cli("run", "--name", "other", "-e", "job_local_addr=192.0.2.7",
                          *command(local, "other"))  # fmt: skip
    assert code == 2, out
    assert "job_address 192.0.2.7 is not an address of" in out, out
    assert not (local.root / "jobs" / "other" / "launch.sh").exists()
    assert ranks("/jobs/j") == before


def stop_saves_and_ends_every_rank(local: Local) -> int:
    """stop: SIGTERM through torchrun; every rank saves and exits; the state reads stopped."""
    steps_so_far = len(re.findall(r"^step \d+ ", local.log("j"), re.M))
    wait_log(local, "j", r"^step \d+ ", count=steps_so_far + 20)
    code, out = local.cli("stop", "--name", "j", "--timeout", "120")
    assert code == 0, out
    assert "localhost: stopped (SIGTERM after" in out, out
    assert ranks("/jobs/j") == []
    emergency = (local.root / "jobs" / "j" / "emergency.jsonl").read_text().splitlines()
    saves = [json.loads(line) for line in emergency]
    assert saves[-1]["signal"] == "SIGTERM", saves
    assert "emergency checkpoint step=" in local.log("j")
    code, seen = local.status("j")
    assert code == 1
    assert seen["state"] == "stopped", seen
    assert seen["checkpoint"]["verified"] is True, seen
    assert seen["emergency"]["step"] == saves[-1]["step"]
    step: int = saves[-1]["step"]
    return step
