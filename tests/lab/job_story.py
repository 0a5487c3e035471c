"""`nodeprep run / status / stop` on the quick start's node, after its chain (tmux, the image,
the heartbeat all in place): the job as the seeds start it, and what only a real node shows.

One story on one node (a two-node job needs the nodes on one segment; see the job role's
README): the reference trainer under torchrun, inside the image, in a tmux session of the
login user, started by the job's systemd unit; the user's sessions are ended (SSH dropped,
logged out) and the job goes on; the node is power-cycled and the unit brings the job back
at boot, resuming from its checkpoint; `stop` has it save and exit and removes the unit.

A rank SIGKILLed and restarted by torchrun, the refusals, and the bit-exact finish after a
stop are the integration tier's job story (tests/integration/job/test_job_local.py, two
ranks on this machine): each costs a torch start-up of some 40 s on this emulated node.
Each step here is paced (--min-step-s) so that the job outlives the faults; the pacing does
not change the training state (tests/unit/checkpoint/test_trainer_data_flags.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lab_helpers import LabNode

from nodeprep.lab.recipe import GUEST_USER
from nodeprep.lab.ssh import run_ssh, wait_for_ssh

KEEP = os.environ.get("NODEPREP_TEST_KEEP", "")
STEPS = 400
PACE_S = 0.3
RUN_DIR = "/data/nodeprep/jobs/lab"
TRAINER = {"job_trainer_steps": STEPS, "job_trainer_checkpoint_every": 5,
           "job_trainer_model_mb": 0.25, "job_trainer_seed": 3, "job_min_free_mb": 256,
           "ansible_timeout": 120}  # fmt: skip


def job_cli(
    inventory: Path, env: dict[str, str], workdir: Path, command: str, name: str,
    variables: dict[str, Any], *args: str,
) -> tuple[int, str]:  # fmt: skip
    varfile = workdir / f"job-{name}-{command}.json"
    varfile.write_text(json.dumps(variables))
    done = subprocess.run(
        [str(Path(sys.executable).with_name("nodeprep")), command, str(inventory), "--name", name,
         "--fast", "-e", f"@{varfile}", *args],
        capture_output=True, text=True, env=env, timeout=900, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    said = f"$ nodeprep {command} --name {name} {' '.join(args)}\n{output}"
    print(said)
    if KEEP:  # NODEPREP_TEST_KEEP=DIR: the transcript and figures kept for the README and notes
        with (Path(KEEP) / "job-transcript.txt").open("a") as handle:
            handle.write(said + "\n")
    return done.returncode, output


def status(
    inventory: Path, env: dict[str, str], workdir: Path, name: str
) -> tuple[int, dict[str, Any]]:
    out = workdir / f"status-{name}.json"
    out.unlink(missing_ok=True)
    code, text = job_cli(inventory, env, workdir, "status", name, TRAINER, "--json", str(out))
    assert out.exists(), text
    found: dict[str, Any] = json.loads(out.read_text())["hosts"]["node1"]
    return code, found


def log_of(node: LabNode, run_dir: str = RUN_DIR) -> str:
    done = run_ssh(node.target, f"cat {run_dir}/train.log 2>/dev/null", timeout_s=30)
    return done.stdout


def wait_log(
    node: LabNode, pattern: str, count: int = 1, timeout: float = 600, run_dir: str = RUN_DIR
) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = log_of(node, run_dir)
        if len(re.findall(pattern, text, re.M)) >= count:
            return text
        time.sleep(1.0)
    raise AssertionError(f"{pattern!r} x{count} not in {run_dir}/train.log:\n{text[-4000:]}")


def steps_logged(node: LabNode) -> int:
    return len(re.findall(r"^step \d+ ", log_of(node), re.M))


def trainer_pids(node: LabNode) -> list[int]:
    """The live registered trainers (the registry the heartbeat reads; a SIGKILLed trainer's
    record stays behind, and the heartbeat ignores it)."""
    live = ("for f in /run/nodeprep/trainers/*.json; do p=${f##*/}; p=${p%.json}; "
            '[ -d "/proc/$p" ] && echo "$p"; done; true')  # fmt: skip
    return sorted(int(pid) for pid in node.sh(live).split())


def wait_resumed(node: LabNode, nth: int, timeout: float = 600) -> tuple[int, str]:
    """Wait for the NTH resume ("start step=S resumed=True") and a step after it: (S, log)."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = log_of(node)
        parts = re.split(r"^start step=\d+ resumed=True$", text, flags=re.M)
        if len(parts) > nth and re.search(r"^step \d+ ", parts[nth], re.M):
            starts = re.findall(r"^start step=(\d+) resumed=True$", text, re.M)
            return int(starts[nth - 1]), text
        time.sleep(1.0)
    raise AssertionError(f"resume {nth} and a step after it not in the log:\n{text[-4000:]}")


def last_step(text: str) -> int:
    return max(int(step) for step in re.findall(r"^step (\d+) ", text, re.M))


class Story:
    """The node, how to reach it with nodeprep, and the figures measured along the way."""

    def __init__(self, node: LabNode, inventory: Path, tmp_path: Path) -> None:
        self.node, self.inventory, self.tmp_path = node, inventory, tmp_path
        self.figures: dict[str, float] = {}

    def cli(
        self, command: str, name: str, variables: dict[str, Any], *args: str
    ) -> tuple[int, str]:
        return job_cli(self.inventory, self.node.env, self.tmp_path, command, name, variables,
                       *args)  # fmt: skip

    def status(self, name: str = "lab") -> tuple[int, dict[str, Any]]:
        return status(self.inventory, self.node.env, self.tmp_path, name)


def the_job_survives_logout_and_a_power_cycle(
    node: LabNode, inventory: Path, tmp_path: Path
) -> dict[str, float]:
    story = Story(node, inventory, tmp_path)
    started(story)
    outlives_logout(story)
    comes_back_after_a_power_cycle(story)
    stop_saves_and_removes_the_unit(story)
    figures = json.dumps({k: round(v, 1) for k, v in story.figures.items()})
    print("job figures:", figures)
    if KEEP:
        (Path(KEEP) / "job-figures.json").write_text(figures + "\n")
    return story.figures


def started(story: Story) -> None:
    node = story.node
    paced = {**TRAINER, "job_trainer_extra_args": ["--min-step-s", str(PACE_S)]}
    began = time.monotonic()
    code, out = story.cli("run", "lab", paced)
    assert code == 0, out
    assert "job lab running in tmux session lab" in out, out
    wait_log(node, r"^step 1 ")
    story.figures["run_to_first_step_s"] = time.monotonic() - began
    record = json.loads(node.sh(f"cat {RUN_DIR}/job.json"))
    assert record["command"][:3] == ["apptainer", "exec", "--bind"], record  # no GPU: no --nv
    assert record["image_sha256"], record
    assert node.sh("tmux ls -F '#{session_name}'").split() == ["lab"]  # the login user's
    code, seen = story.status()
    assert code == 0, seen
    assert seen["state"] == "running", seen
    assert seen["heartbeat"] in ("healthy", "suspect"), seen  # the daemon runs and reports


def outlives_logout(story: Story) -> None:
    """The user's sessions end (SSH dropped, logged out): the job goes on."""
    node = story.node
    run_ssh(node.target, f"sudo loginctl terminate-user {GUEST_USER}", timeout_s=30)
    before = steps_logged(node)
    wait_log(node, r"^step \d+ ", count=before + 5)


def comes_back_after_a_power_cycle(story: Story) -> None:
    """The unit brings the session back at boot; the trainer resumes from its checkpoint."""
    node = story.node
    boot = node.sh("cat /proc/sys/kernel/random/boot_id").strip()
    last = last_step(log_of(node))
    reset = node.cli("fault", "node1", "reset")
    assert reset.returncode == 0, reset.stderr
    cut = time.monotonic()
    wait_for_ssh(node.target, 300)
    assert node.sh("cat /proc/sys/kernel/random/boot_id").strip() != boot
    resumed, _ = wait_resumed(node, 1)
    story.figures["reset_to_next_step_s"] = time.monotonic() - cut
    story.figures["reset_steps_lost"] = max(0, last - resumed)
    assert node.sh("systemctl is-enabled nodeprep-job-lab.service").strip() == "enabled"


def stop_saves_and_removes_the_unit(story: Story) -> int:
    """SIGTERM through torchrun: the rank saves and exits; no unit is left for boot."""
    node = story.node
    stopped = time.monotonic()
    code, out = story.cli("stop", "lab", TRAINER, "--timeout", "240")
    assert code == 0, out
    assert "node1: stopped (SIGTERM after" in out, out
    story.figures["stop_s"] = time.monotonic() - stopped
    assert trainer_pids(node) == []
    saves = [json.loads(line) for line in node.sh(f"cat {RUN_DIR}/emergency.jsonl").splitlines()]
    assert saves[-1]["signal"] == "SIGTERM", saves
    code, seen = story.status()
    assert code == 1
    assert seen["state"] == "stopped", seen
    assert seen["checkpoint"]["verified"] is True, seen
    assert seen["boot_unit"] is False, seen
    assert node.sh("systemctl list-unit-files 'nodeprep-job-*' --no-legend | wc -l").strip() == "0"
    step: int = saves[-1]["step"]
    return step
