"""The two-node job story: `nodeprep run / status / stop` and `nodeprep drill` across two lab
nodes whose bond segments are wired together (node.Link), the reference trainer under torchrun
inside the image, gloo over the bond, each node keeping its own checkpoint copies, the
heartbeat watching each node (the stand-in metadata service on both).

In order: run on both (the c10d rendezvous on node1's bond address); status, with each node's
step read from its own log; the login user's sessions ended on both nodes (the job goes on);
`nodeprep drill -l node2` (node2 holds neither global rank 0 nor the rendezvous) read from
node2's own log: kill (node2's rank SIGKILLed, torchrun restarts the group on both nodes, the
trainer resumes), then netem and link on node2's bond (nothing lost; for link, node2's bond
fails over alone and the segment peer's link carries the job between the segments);
blackhole on node2 while the bonds use MII monitoring (the bond does not notice: the drill
fails, exit 1), then both bonds switched to ARP monitoring by the nic_bond role under the
running job; a second drill on node2, with an operator's login session open there:
blackhole (now the bond fails over), ssh-drop, disk-full, preempt and reboot, each within its
limit; both nodes as they were (no qdisc, no tc hook, both members up, no undo unit, record,
fill or notice); node2 power-cycled (the boot unit brings its session back, the group
re-forms, the trainer resumes from a checkpoint both nodes verify); stop (SIGTERM, an
emergency save on both nodes, no unit left); the job run again to its end beside nothing, and
an uninterrupted job of the same world size: the final state hashes are equal; last,
`nodeprep verify` passes on both nodes.

Steps are paced (--min-step-s) while faults happen, so the job outlives them; the pacing does
not change the state. `story(...)` returns the figures it measured, and prints them after
each part.
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

from drill_story import disk_full_and_preempt_said_what_they_saw

from nodeprep.lab.recipe import GUEST_USER

NODES = ("node1", "node2")
STEPS = 500
# Paced so that the job outlives the faults: a step on these nodes takes 0.45 to 1.2 s, and at
# 0.3 s the job once reached its 200th step during the drills, before node2's power cycle.
# At 3 s a step the nodes' two vCPUs are mostly idle for the provision and the drills.
PACE_S = 3.0
RUN_ROOT = "/data/nodeprep/jobs"
# Each of kill, preempt, reboot and the power cycle costs node1's agent one restart of its
# group (node2's agent is a new one after all but the kill): more than torchrun's default 3.
TRAINER = {"job_trainer_steps": STEPS, "job_trainer_checkpoint_every": 5,
           "job_trainer_model_mb": 0.25, "job_trainer_seed": 3, "job_min_free_mb": 256,
           "job_max_restarts": 10, "ansible_timeout": 120}  # fmt: skip
PACED = {**TRAINER, "job_trainer_extra_args": ["--min-step-s", str(PACE_S)]}
DRILLED = {**PACED, "job_drill_timeout_s": 900}  # a restart of both nodes' torch takes minutes
BOND_MEMBERS = ["ens4", "ens5"]

Sh = Callable[[str, str], str]  # (node, command) -> stdout; raises on failure
Argv = Callable[[str, list[str]], list[str]]  # (node, command) -> an ssh command line


class Story:
    """How to reach the nodes and run nodeprep, and the figures measured along the way."""

    def __init__(self, sh: Sh, lab: Callable[..., None], inventory: Path, env: dict[str, str],
                 workdir: Path, transcript: Path | None = None,
                 argv: Argv | None = None) -> None:  # fmt: skip
        self.sh, self.lab, self.inventory, self.env = sh, lab, inventory, env
        self.argv = argv
        self.workdir, self.transcript = workdir, transcript
        self.figures: dict[str, float] = {}

    def cli(self, command: str, name: str, variables: dict[str, Any], *args: str,
            timeout: float = 900) -> tuple[int, str]:  # fmt: skip
        varfile = self.workdir / f"job-{name}-{command}.json"
        varfile.write_text(json.dumps(variables))
        return self.nodeprep(command, "--name", name, "--fast", "-e", f"@{varfile}", *args,
                             timeout=timeout)  # fmt: skip

    def nodeprep(self, command: str, *args: str, timeout: float = 900) -> tuple[int, str]:
        """`nodeprep COMMAND INVENTORY ARGS...` as a user runs it: its exit and output."""
        done = subprocess.run(
            [str(Path(sys.executable).with_name("nodeprep")), command, str(self.inventory),
             *args],
            capture_output=True, text=True, env=self.env, timeout=timeout, check=False,
        )  # fmt: skip
        output = done.stdout + done.stderr
        said = f"$ nodeprep {command} INVENTORY {' '.join(args)}\n{output}"
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
    """The whole story; returns its figures (and prints them as they come)."""
    began = time.monotonic()
    parts = (
        started,
        outlives_logout,
        drilled_on_node2,
        blackhole_needs_arp_monitoring,
        drilled_again_on_node2,
        left_as_they_were,
        comes_back_after_a_power_cycle,
        stop_saves_on_both_nodes,
        finishes_bit_exact,
        verify_passes_on_both_nodes,
    )
    for part in parts:
        part(story)
        story.figures["story_s"] = time.monotonic() - began
        print(f"two-node story: {part.__name__} done:", json.dumps(story.figures), flush=True)
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
    so node2 stays on ens5 until its bond is next activated."""
    pid = trainer_pid(story, "node2")
    drills = drill_node2(story, "kill,netem,link", "drill-node2.json", timeout=2400)
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


def drill_node2(
    story: Story, faults: str, name: str, timeout: float, duration: float = 5
) -> dict[str, Any]:
    """`nodeprep drill -l node2 --faults FAULTS`: every fault passed, with node2 as it was;
    the drills' results by fault."""
    report = story.workdir / name
    code, out = story.cli("drill", "duo", DRILLED, "--faults", faults, "-l", "node2", "--duration",
                          f"{duration:g}", "--json", str(report), timeout=timeout)  # fmt: skip
    assert code == 0, out
    drills = {d["fault"]: d for d in json.loads(report.read_text())["drills"]}
    assert sorted(drills) == sorted(faults.split(",")), drills
    for fault, found in drills.items():
        assert found["passed"], (fault, found)
        assert found["restored"], (fault, found)
        assert found["host"] == "node2", (fault, found)
    return drills


def members_up(story: Story, node: str) -> list[str]:
    """NODE's bond members whose MII status is up (under ARP monitoring: the ARP's verdict)."""
    text = story.sh(node, "cat /proc/net/bonding/bond0")
    blocks = text.split("Slave Interface: ")[1:]
    return sorted(b.split("\n", 1)[0].strip() for b in blocks if "\nMII Status: up" in b)


def blackhole_needs_arp_monitoring(story: Story) -> None:
    """blackhole on node2 while the bonds watch their members by MII polling: the bond does
    not notice (exit 1; node2 left as it was). nic_bond then switches both nodes' bonds to
    ARP monitoring of the segments' peer while the job runs. Each backup member stays up by
    hearing its own bond's ARP requests, which the peer floods to the other segment."""
    report = story.workdir / "blackhole-mii.json"
    code, out = story.cli("drill", "duo", DRILLED, "--faults", "blackhole", "-l", "node2",
                          "--duration", "5", "--json", str(report), timeout=1200)  # fmt: skip
    assert code == 1, out
    (missed,) = json.loads(report.read_text())["drills"]
    assert missed["passed"] is False, missed
    assert missed["detected_by"] == "", missed
    assert "miimon 100 ms" in missed["detail"], missed
    assert "did not notice: MII monitoring watches the carrier only" in json.dumps(missed), missed
    assert missed["restored"] is True, missed
    restarts = len(resumes(story.log("node1", "duo")))
    began = time.monotonic()
    code, out = story.nodeprep("provision", "--tags", "nic_bond", "--fast",
                               "-e", "nic_bond_arp_interval=100", timeout=1200)  # fmt: skip
    assert code == 0, out
    story.figures["arp_provision_s"] = time.monotonic() - began
    for node in NODES:
        text = story.sh(node, "cat /proc/net/bonding/bond0")
        assert "ARP Polling Interval (ms): 100\n" in text, text
        assert "MII Polling Interval (ms): 0\n" in text, text
    story.wait("both members of both bonds up under ARP monitoring",
               lambda: all(members_up(story, n) == BOND_MEMBERS for n in NODES), 120)  # fmt: skip
    before = max(steps(story.log("node2", "duo")))
    story.wait("steps after the bonds' change", lambda: max(steps(story.log("node2", "duo")))
               >= before + 3, 600)  # fmt: skip
    # Whether the change of both bonds under the job cost it a restart: reported, not judged.
    story.figures["arp_change_restarts"] = len(resumes(story.log("node1", "duo"))) - restarts


def drilled_again_on_node2(story: Story) -> None:
    """With an operator's login session open on node2 as the job's user, `nodeprep drill -l
    node2`: blackhole (the ARP-monitored bond fails over, nothing lost); ssh-drop (the
    session ends, the job goes on); disk-full (node2's /data filled: its save fails, its
    heartbeat's probe reports it, the fill goes, the next save commits); preempt (the notice
    at node2's metadata stand-in: node2's heartbeat asks its rank for an emergency
    checkpoint, which every rank takes together; SIGTERM to node2's job, which every rank
    saves for; node2's job started again, the group resumes with at most 1 step lost);
    reboot (node2's unit's ExecStop has every rank save at the shutdown; the unit starts the
    job at boot and the group resumes)."""
    assert story.argv is not None
    session = subprocess.Popen(story.argv("node2", ["sleep", "1800"]), stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        opened = "pgrep -x -f 'sleep 1800' || true"
        story.wait("the operator's session on node2", lambda: story.sh("node2", opened).strip(), 60)
        # 10 s: a notice reaches the ranks at a step boundary (up to one 3 s step), every rank
        # saves together, and the drill looks for that checkpoint while the notice lasts.
        drills = drill_node2(story, "blackhole,ssh-drop,disk-full,preempt,reboot",
                             "drill-node2-again.json", timeout=3600, duration=10)  # fmt: skip
        session.wait(timeout=60)  # ssh-drop ended the operator's session, or this raises
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
    blackhole = drills["blackhole"]
    assert blackhole["detected_by"] == "bond", blackhole
    assert "ARP monitoring every 100 ms" in blackhole["detail"], blackhole
    for fault in ("blackhole", "ssh-drop", "disk-full"):
        assert drills[fault]["steps_lost"] == 0, drills[fault]
    assert f"login session(s) of {GUEST_USER} ended" in drills["ssh-drop"]["detail"], drills
    disk_full_and_preempt_said_what_they_saw(drills)
    reboot = drills["reboot"]
    assert reboot["detected_by"] == "boot unit", reboot
    assert reboot["steps_lost"] <= reboot["steps_lost_limit"] == 5, reboot
    assert "the shutdown's SIGTERM saved step" in reboot["detail"], reboot
    assert "resumed from step" in reboot["detail"], reboot
    for fault, found in drills.items():
        for key in ("detect_s", "checkpoint_s", "steps_lost", "next_step_s"):
            if found.get(key) is not None:
                story.figures[f"{fault}_{key}"] = found[key]


def left_as_they_were(story: Story) -> None:
    """After every drill, on both nodes: no netem qdisc, no tc hook on a member, both members
    up, no undo unit or record, no fill file, no notice, the metadata stand-in serving."""
    for node in NODES:
        assert "netem" not in story.sh(node, "sudo tc qdisc show dev bond0 root")
        hooks = story.sh(node, "sudo tc qdisc show dev ens4; sudo tc qdisc show dev ens5")
        assert "clsact" not in hooks, (node, hooks)
        assert "ingress" not in hooks, (node, hooks)
        assert members_up(story, node) == BOND_MEMBERS, node
        left = story.sh(node, "systemctl list-units --all --no-legend 'nodeprep-drill-undo-*'; "
                        "sudo find /run/nodeprep/drills /var/lib/nodeprep/drills -mindepth 1; "
                        f"sudo ls -d {RUN_ROOT}/duo/checkpoints/.nodeprep-drill-fill-* "
                        "/run/nodeprep/lab/cloud-notice; true")  # fmt: skip
        assert left.strip() == "", (node, left)
        assert story.sh(node, "systemctl is-active nodeprep-lab-metadata").strip() == "active"


def comes_back_after_a_power_cycle(story: Story) -> None:
    """node2 (not the rendezvous host) power-cycled: its unit brings the job back at boot,
    the group re-forms, and both resume from a checkpoint both verify."""
    boot = story.sh("node2", "cat /proc/sys/kernel/random/boot_id")
    reached = max(steps(story.log("node1", "duo")))
    assert reached < STEPS - 20, f"the job is at step {reached} of {STEPS}: too near its end"
    nth = len(resumes(story.log("node1", "duo"))) + 1
    cut = time.monotonic()
    story.lab("fault", "node2", "reset")
    _, lost = story.wait("the resume after the power cycle",
                         lambda: stepped_after_resume(story, nth))  # fmt: skip
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
        hashes[name] = story.wait(f"job {name} to finish",
                                  functools.partial(finished, story, name), 1800)  # fmt: skip
    assert hashes["duo"] == hashes["ref"], hashes
    assert int(hashes["duo"][0]) == STEPS, hashes
    code, seen = story.status("duo")
    assert code == 0, seen
    assert {seen[n]["state"] for n in NODES} == {"finished"}, seen


# As provisioned (heartbeat_cloud, the bond's ARP monitoring); no data set staged (the lab
# inventory names the quick start's); two smoke drills at once on the 2 host cores.
VERIFIED = {"ansible_timeout": 120, "heartbeat_cloud": "aws", "nic_bond_arp_interval": 100,
            "smoke_data": "", "smoke_workers": 0, "smoke_timeout_s": 1500,
            "node_checks_disk_paths": [{"path": "/data", "min_size_gb": 0.9,
                                        "min_free_gb": 0.2}]}  # fmt: skip


def verify_passes_on_both_nodes(story: Story) -> None:
    """`nodeprep verify` on both nodes once the story is over: every check passes or skips
    (no GPU; roles the story did not apply), the smoke drill included."""
    varfile, report = story.workdir / "verify-vars.json", story.workdir / "verify.json"
    varfile.write_text(json.dumps(VERIFIED))
    began = time.monotonic()
    code, out = story.nodeprep("verify", "--fast", "-e", f"@{varfile}", "--json", str(report),
                               timeout=1800)  # fmt: skip
    story.figures["verify_s"] = time.monotonic() - began
    assert code == 0, out
    found = json.loads(report.read_text())
    print("verify:", json.dumps(found.get("summary", found))[:2000], flush=True)
