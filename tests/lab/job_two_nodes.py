"""The two-node job story: `nodeprep run / status / stop` across two lab nodes whose bond
segments are wired together (node.Link), the reference trainer under torchrun inside the image,
gloo over the bond, each node keeping its own checkpoint copies.

In order: run on both (the c10d rendezvous on node1's bond address); status, with each node's
step read from its own log; the login user's sessions ended on both nodes (the job goes on);
`nodeprep drill -l node2` (node2 holds neither global rank 0 nor the rendezvous) read from
node2's own log: kill (node2's rank SIGKILLed, torchrun restarts the group on both nodes, the
trainer resumes), then netem and link on node2's bond (nothing lost; for link, node2's bond
fails over alone and the segment peer's link carries the job between the segments); node2
power-cycled
(the boot unit brings its session back, the group re-forms, the trainer resumes from a
checkpoint both nodes verify); stop (SIGTERM, an emergency save on both nodes, no unit left);
the job run again to its end beside nothing, and an uninterrupted job of the same world size:
the final state hashes are equal.

Steps are paced (--min-step-s) while faults happen, so the job outlives them; the pacing does
not change the state. `story(...)` returns the figures it measured.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodeprep.lab.recipe import GUEST_USER

NODES = ("node1", "node2")
STEPS = 200
# Paced so that the job outlives the faults: a step on these nodes takes 0.45 to 1.2 s, and at
# 0.3 s the job once reached its 200th step during the drills, before node2's power cycle.
PACE_S = 1.5
RUN_ROOT = "/data/nodeprep/jobs"
TRAINER = {"job_trainer_steps": STEPS, "job_trainer_checkpoint_every": 5,
           "job_trainer_model_mb": 0.25, "job_trainer_seed": 3, "job_min_free_mb": 256,
           "ansible_timeout": 120}  # fmt: skip
PACED = {**TRAINER, "job_trainer_extra_args": ["--min-step-s", str(PACE_S)]}

Sh = Callable[[str, str], str]  # (node, command) -> stdout; raises on failure


class Story:
    """How to reach the nodes and run nodeprep, and the figures measured along the way."""

    def __init__(self, sh: Sh, lab: Callable[..., None], inventory: Path, env: dict[str, str],
                 workdir: Path, transcript: Path | None = None) -> None:  # fmt: skip
        self.sh, self.lab, self.inventory, self.env = sh, lab, inventory, env
        self.workdir, self.transcript = workdir, transcript
        self.figures: dict[str, float] = {}

    def cli(self, command: str, name: str, variables: dict[str, Any], *args: str,
            timeout: float = 900) -> tuple[int, str]:  # fmt: skip
        varfile = self.workdir / f"job-{name}-{command}.json"
        varfile.write_text(json.dumps(variables))
        done = subprocess.run(
            [str(Path(sys.executable).with_name("nodeprep")), command, str(self.inventory),
             "--name", name, "--fast", "-e", f"@{varfile}", *args],
            capture_output=True, text=True, env=self.env, timeout=timeout, check=False,
        )  # fmt: skip
        output = done.stdout + done.stderr
        said = f"$ nodeprep {command} INVENTORY --name {name} {' '.join(args)}\n{output}"
        print(said, flush=True)
        if self.transcript is not None:
            with self.transcript.open("a") as handle:
                handle.write(said + "\n")
        return done.returncode, output

    def status(self, name: str) -> tuple[int, dict[str, Any]]:
        out = self.workdir / f"status-{name}.json"
        out.unlink(missing_ok=True)
        code, text = self.cli("status", name, TRAINER, "--json", str(out))
        assert out.exists(), text
        hosts: dict[str, Any] = json.loads(out.read_text())["hosts"]
        return code, hosts

    def log(self, node: str, name: str) -> str:
        return self.sh(node, f"cat {RUN_ROOT}/{name}/train.log 2>/dev/null; true")

    def wait(self, what: str, test: Callable[[], Any], timeout: float = 900) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = test()
            if found:
                return found
            time.sleep(1.0)
        logs = "\n".join(f"--- {n}\n{self.log(n, 'duo')[-3000:]}" for n in NODES)
        raise AssertionError(f"timed out waiting for {what}\n{logs}")


def steps(text: str) -> list[int]:
    return [int(step) for step in re.findall(r"^step (\d+) ", text, re.M)]


def resumes(text: str) -> list[int]:
    return [int(step) for step in re.findall(r"^start step=(\d+) resumed=True$", text, re.M)]


def stepped_after_resume(story: Story, nth: int) -> tuple[int, int] | None:
    """Once the NTH resume has logged a step after it (in node1's log): the step
    it resumed from and the steps lost (the newest step logged before it, minus that)."""
    text = story.log("node1", "duo")
    parts = re.split(r"^start step=\d+ resumed=True$", text, flags=re.M)
    if len(parts) > nth and re.search(r"^step \d+ ", parts[nth], re.M):
        resumed = resumes(text)[nth - 1]
        return resumed, max([0, *(step - resumed for step in steps(parts[nth - 1]))])
    return None


def finished(story: Story, name: str) -> tuple[str, str] | None:
    """(step, state sha256) once job NAME's log on node1 says that it is done."""
    done = re.findall(r"^done step=(\d+) state_sha256=(\w+)$", story.log("node1", name), re.M)
    return done[-1] if done else None


def trainer_pid(story: Story, node: str) -> int:
    """The live registered trainer on NODE (the registry the heartbeat reads)."""
    live = ("for f in /run/nodeprep/trainers/*.json; do p=${f##*/}; p=${p%.json}; "
            '[ -d "/proc/$p" ] && echo "$p"; done; true')  # fmt: skip
    pids = [int(pid) for pid in story.sh(node, live).split()]
    assert len(pids) == 1, pids
    return pids[0]


def story(story: Story) -> dict[str, float]:
    """The whole story; returns its figures."""
    began = time.monotonic()
    started(story)
    outlives_logout(story)
    drilled_on_node2(story)
    comes_back_after_a_power_cycle(story)
    stop_saves_on_both_nodes(story)
    finishes_bit_exact(story)
    story.figures["story_s"] = time.monotonic() - began
    return story.figures


def started(story: Story) -> None:
    """run on both nodes: the rendezvous on node1's bond address, gloo on the bond."""
    began = time.monotonic()
    code, out = story.cli("run", "duo", PACED)
    assert code == 0, out
    story.figures["run_command_s"] = time.monotonic() - began
    story.wait("the first step", lambda: steps(story.log("node1", "duo")))
    story.figures["run_to_first_step_s"] = time.monotonic() - began
    for node in NODES:
        job = json.loads(story.sh(node, f"cat {RUN_ROOT}/duo/job.json"))
        assert job["env"]["GLOO_SOCKET_IFNAME"] == "bond0", job["env"]
        assert "--rdzv-endpoint 10.77.0.15:29400" in " ".join(job["command"]), job["command"]
    story.wait("node2's own log to show steps", lambda: steps(story.log("node2", "duo")))
    code, seen = story.status("duo")
    assert code == 0, seen
    assert {seen[n]["state"] for n in NODES} == {"running"}, seen
    assert all(isinstance(seen[n]["step"], int) for n in NODES), seen


def outlives_logout(story: Story) -> None:
    """The SSH sessions dropped and the login user logged out on both nodes: steps go on."""
    for node in NODES:  # a second later, so that this SSH session is not cut mid-command
        story.sh(node, f"sudo systemd-run --quiet --on-active=1s loginctl terminate-user "
                 f"{GUEST_USER}")  # fmt: skip
    time.sleep(3)
    before = max(steps(story.log("node1", "duo")))
    story.wait("steps after logout", lambda: max(steps(story.log("node1", "duo"))) >= before + 5)


def drilled_on_node2(story: Story) -> None:
    """`nodeprep drill -l node2`, read from node2's own log: kill (its rank SIGKILLed; torchrun
    restarts the group on both nodes, which resumes within the checkpoint interval), then
    netem and link on node2's bond (no step lost, no restart). For link, node2 fails over
    alone to its other NIC's segment: the job's traffic crosses the segment peer's link, as
    between the two switches of the bond's members. The bond has no primary to go back to,
    so it does so until node2's power cycle."""
    pid = trainer_pid(story, "node2")
    report = story.workdir / "drill-node2.json"
    # A restart of both nodes' torch under emulation takes minutes: the drill waits 15.
    code, out = story.cli("drill", "duo", {**PACED, "job_drill_timeout_s": 900},
                          "--faults", "kill,netem,link", "-l", "node2", "--duration", "5",
                          "--json", str(report), timeout=2400)  # fmt: skip
    assert code == 0, out
    drills = {d["fault"]: d for d in json.loads(report.read_text())["drills"]}
    assert sorted(drills) == ["kill", "link", "netem"], drills
    for fault, found in drills.items():
        assert found["passed"], (fault, found)
        assert found["restored"], (fault, found)
        assert found["host"] == "node2", (fault, found)
    kill = drills["kill"]
    assert kill["detected_by"] == "torchrun", kill
    assert "SIGKILL to rank pid " in kill["detail"], kill
    assert kill["steps_lost"] <= kill["steps_lost_limit"] == TRAINER["job_trainer_checkpoint_every"]
    assert drills["netem"]["steps_lost"] == drills["link"]["steps_lost"] == 0, drills
    assert drills["link"]["detected_by"] == "bond", drills["link"]
    # The group restarted on node1 too: its log (global rank 0) resumed once.
    story.wait("node1's resume after the kill", lambda: stepped_after_resume(story, 1))
    assert trainer_pid(story, "node2") != pid  # node2's rank is a new process
    story.figures["sigkill_to_next_step_s"] = kill["next_step_s"]
    story.figures["sigkill_steps_lost"] = kill["steps_lost"]
    story.figures["link_failover_s"] = drills["link"]["detect_s"]


def comes_back_after_a_power_cycle(story: Story) -> None:
    """node2 (not the rendezvous host) power-cycled: its unit brings the job back at boot,
    the group re-forms, and both resume from a checkpoint both verify."""
    boot = story.sh("node2", "cat /proc/sys/kernel/random/boot_id")
    cut = time.monotonic()
    story.lab("fault", "node2", "reset")
    _, lost = story.wait("the resume after the power cycle", lambda: stepped_after_resume(story, 2))
    story.figures["reset_to_next_step_s"] = time.monotonic() - cut
    story.figures["reset_steps_lost"] = lost
    assert story.sh("node2", "cat /proc/sys/kernel/random/boot_id") != boot
    for node in NODES:
        assert story.sh(node, "systemctl is-enabled nodeprep-job-duo.service").strip() == "enabled"


def stop_saves_on_both_nodes(story: Story) -> None:
    """stop: SIGTERM, an emergency save of the same step on both nodes, no unit left."""
    stopping = time.monotonic()
    code, out = story.cli("stop", "duo", TRAINER, "--timeout", "240")
    assert code == 0, out
    story.figures["stop_s"] = time.monotonic() - stopping
    saved = []
    for node in NODES:
        assert f"{node}: stopped (SIGTERM after" in out, out
        lines = story.sh(node, f"cat {RUN_ROOT}/duo/emergency.jsonl").splitlines()
        saved.append(json.loads(lines[-1]))
        assert saved[-1]["signal"] == "SIGTERM", saved
        units = story.sh(node, "systemctl list-unit-files 'nodeprep-job-*' --no-legend | wc -l")
        assert units.strip() == "0"
    assert saved[0]["step"] == saved[1]["step"], saved
    code, seen = story.status("duo")
    assert code == 1
    assert {seen[n]["state"] for n in NODES} == {"stopped"}, seen
    assert all(seen[n]["checkpoint"]["verified"] for n in NODES), seen


def finishes_bit_exact(story: Story) -> None:
    """The rest of the run unpaced, then an uninterrupted run of the same world size (one
    after the other: two torch jobs at once exhaust a lab node's memory): equal state."""
    hashes: dict[str, tuple[str, str]] = {}
    for name in ("duo", "ref"):
        code, out = story.cli("run", name, TRAINER)
        assert code == 0, out
        hashes[name] = story.wait(f"job {name} to finish", functools.partial(finished, story, name))
    assert hashes["duo"] == hashes["ref"], hashes
    assert int(hashes["duo"][0]) == STEPS, hashes
    code, seen = story.status("duo")
    assert code == 0, seen
    assert {seen[n]["state"] for n in NODES} == {"finished"}, seen
