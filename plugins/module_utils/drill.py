"""Chaos drills against a running job on one node: the faults, their undo, what each cost.

A drill injects one fault on the node where it runs, watches the job's log while the fault
lasts, undoes the fault and then checks that the node is as it was. Before anything is
injected the undo is armed as a transient systemd timer (``systemd-run --on-active``), so
it runs on the node even when the controller, its connection or this process is lost; a
drill that ends normally runs the undo itself and removes the timer.

What a drill measures comes from the node alone: the reference trainer's log lines carry
the step and its wall time (``step N loss=... t=...``), torchrun's own lines say when it saw
a worker die, the checkpoints directory says what was committed, and the bond's sysfs files
say when it failed over.

Standard library and Python 3.8 only: this runs on the nodes as Ansible module_utils, and
the controller imports it too (``nodeprep.drill``) for the fault names and limits.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shlex
import subprocess
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from .bonding import parse as parse_bond

# Every fault the drill command knows, in the order of the issue that asked for them.
FAULTS = ("kill", "preempt", "link", "blackhole", "netem", "disk-full", "ssh-drop", "reboot")
# Faults that can cut a node off its network; outside the lab they need --yes.
CUTS_OFF = ("link", "blackhole", "netem", "reboot")
# Steps a fault may cost: None means "at most the job's checkpoint interval".
STEPS_LOST_LIMIT: dict[str, int | None] = {
    "kill": None, "reboot": None, "preempt": 1, "link": 0, "netem": 0, "ssh-drop": 0,
    "blackhole": 0, "disk-full": 0,
}  # fmt: skip

UNDO_PREFIX = "nodeprep-drill-undo-"
# How long a steady fault's undo may take to show (a member brought up needs its monitor).
SETTLE_S = 30
# A drill in progress on the node: its pid, fault and undo unit (removed by either undo).
RECORD_DIR = "/run/nodeprep/drills"
# A reboot drill's record, kept across the boot it waits for (not in /run).
REBOOT_DIR = "/var/lib/nodeprep/drills"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
# The heartbeat's config on the node, and the record a metadata stand-in keeps while it
# serves there (nodeprep/lab/cloud_standin.py, on the lab only): the preempt drill posts a
# notice only through a stand-in; on a real cloud it says how to ask the provider instead.
HEARTBEAT_CONFIG = "/etc/nodeprep/heartbeat.json"
STANDIN_RECORD = "/run/nodeprep/metadata-standin.json"
METADATA_URL = "http://169.254.169.254"  # where the heartbeat asks when its probe names none
PROVIDER_DRILLS = {
    "aws": "AWS Fault Injection Service's aws:ec2:send-spot-instance-interruptions action "
    "against this instance (a real two-minute notice, then the reclaim)",
    "gcp": "`gcloud compute instances simulate-maintenance-event` on this VM (a Spot or "
    "preemptible VM is then preempted)",
    "azure": "`az vm simulate-eviction` on this Spot VM (a Preempt event, then the eviction)",
}
_STEP = re.compile(r"^step (\d+) loss=\S+ t=([0-9.]+)")
_START = re.compile(r"^start step=(\d+) ")  # then resumed=True|False
_BOOT = re.compile(r"nodeprep: job \S+ starting \(boot ([0-9a-f-]+)\)")  # launch.sh's first line
_TORCHRUN_SAW = re.compile(r"failed \(exitcode: |Restarting worker group")
_SAVE_FAILED = re.compile(r"saving checkpoint (\S+) in \S+ failed")
_PROBE_DOWN = re.compile(r'^nodeprep_heartbeat_probe_up\{probe="([^"]+)",type="free_space"\} 0')
FILL_PREFIX = ".nodeprep-drill-fill-"
_ROOT_QDISC = re.compile(r"^qdisc (\S+) ([0-9a-f]+:) root")


class DrillError(ValueError):
    """A drill that cannot run here; ``str()`` is one sentence naming why and the fix."""


def parse_faults(text: str) -> list[str]:
    """``kill,netem`` -> ["kill", "netem"]; DrillError naming the first bad name."""
    names = [name.strip() for name in str(text).split(",")]
    if not str(text).strip() or not all(names):
        raise DrillError(
            f"--faults {text!r} names no fault (or has an empty item); give one or more of "
            f"{', '.join(FAULTS)}, separated by commas."
        )
    for name in names:
        if name not in FAULTS:
            raise DrillError(
                f"--faults: unknown fault {name!r}; the faults are {', '.join(FAULTS)}."
            )
    return names


def checkpoint_every(command: list[str], default: int = 50) -> int:
    """The reference trainer's --checkpoint-every from the job's command (job.json)."""
    for index, arg in enumerate(command):
        if arg == "--checkpoint-every" and index + 1 < len(command):
            try:
                return int(command[index + 1])
            except ValueError:
                return default
        if arg.startswith("--checkpoint-every="):
            try:
                return int(arg.split("=", 1)[1])
            except ValueError:
                return default
    return default


class LogWatch:
    """New lines of the job's log from the moment it is made, each with when it was seen."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.offset = os.path.getsize(path)
        except OSError:
            self.offset = 0
        self.partial = ""
        self.lines: list[tuple[float, str]] = []

    def poll(self) -> list[tuple[float, str]]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return []
        self.offset += len(data)
        text = self.partial + data.decode("utf-8", "replace")
        parts = text.split("\n")
        self.partial = parts.pop()
        now = time.time()
        new = [(now, part.rstrip("\r")) for part in parts]
        self.lines.extend(new)
        return new


def last_step(path: str, limit: int = 262144) -> tuple[int, float] | None:
    """The newest ``step N ... t=T`` line of the log: (N, T)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - limit))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(text.splitlines()):
        found = _STEP.match(line)
        if found:
            return int(found.group(1)), float(found.group(2))
    return None


class Timeline:
    """What the log showed after the fault: torchrun's notice, the resume, the next step."""

    def __init__(self, fault_time: float) -> None:
        self.fault_time = fault_time
        self.torchrun_saw: float | None = None
        self.resumed_from: int | None = None
        self.resumed_at: float | None = None
        self.steps: list[tuple[int, float]] = []  # (step, its t=) after the fault
        self.after_resume: list[tuple[int, float]] = []  # steps printed after a start line
        self.resumed = False  # the start line said resumed=True (from a checkpoint)
        self.restarts = 0

    def feed(self, lines: list[tuple[float, str]]) -> None:
        for seen, line in lines:
            step = _STEP.match(line)
            if step:
                when = float(step.group(2))
                if when >= self.fault_time:
                    self.steps.append((int(step.group(1)), when))
                if self.resumed_from is not None:
                    self.after_resume.append((int(step.group(1)), when))
                continue
            start = _START.match(line)
            if start:
                self.resumed_from, self.resumed_at = int(start.group(1)), seen
                self.resumed = "resumed=True" in line
                self.after_resume = []
                self.restarts += 1
                continue
            if _TORCHRUN_SAW.search(line) and self.torchrun_saw is None:
                self.torchrun_saw = seen

    def next_step_after(self, when: float) -> tuple[int, float] | None:
        for step, at in self.steps:
            if at >= when:
                return step, at
        return None


def run(argv: list[str], timeout: float = 30) -> tuple[int, str, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, "", str(exc)
    return done.returncode, done.stdout, done.stderr


class Undo:
    """An undo armed on the node before the fault, run by a timer if nobody else runs it.

    While it is armed, RECORD_DIR/ID.json names the drill's process, fault and unit, so
    that an operator (or a test) can see what runs and what will put it back.
    """

    def __init__(self, drill_id: str, script: str, after_s: float, fault: str = "") -> None:
        self.unit = UNDO_PREFIX + drill_id
        self.record = os.path.join(RECORD_DIR, drill_id + ".json")
        self.script = f"{script}; rc=$?; rm -f {shlex.quote(self.record)}; exit $rc"
        self.after_s = after_s
        self.fault = fault
        self.armed = False

    def arm(self) -> None:
        if not os.path.isdir("/run/systemd/system"):
            raise DrillError(
                "the node does not run systemd, so a fault's undo cannot be armed to outlive "
                "the drill; drills need systemd on the node."
            )
        # A unit of this name that failed earlier would make systemd-run refuse the name.
        run(["systemctl", "reset-failed", f"{self.unit}.service", f"{self.unit}.timer"])
        rc, _out, err = run([
            "systemd-run", f"--unit={self.unit}", f"--on-active={max(1, round(self.after_s))}",
            "--timer-property=AccuracySec=100ms", "--description=nodeprep drill undo",
            "/bin/sh", "-c", self.script,
        ])  # fmt: skip
        if rc != 0:
            raise DrillError(f"cannot arm the fault's undo with systemd-run: {err.strip()}")
        self.armed = True
        os.makedirs(RECORD_DIR, mode=0o755, exist_ok=True)
        with open(self.record, "w", encoding="utf-8") as handle:
            record = {"pid": os.getpid(), "fault": self.fault, "unit": self.unit,
                      "undo": self.script, "armed_at": time.time(),
                      "fires_after_s": self.after_s}  # fmt: skip
            handle.write(json.dumps(record) + "\n")

    def now(self) -> tuple[int, str]:
        """Remove the timer, then run the undo here; (rc, stderr) of the undo.

        The timer goes first so that its copy of the undo cannot run beside this one; one
        already running is waited for (systemctl stop waits for the service).
        """
        if self.armed:
            run(["systemctl", "stop", f"{self.unit}.timer", f"{self.unit}.service"])
            run(["systemctl", "reset-failed", f"{self.unit}.service", f"{self.unit}.timer"])
            self.armed = False
        rc, _out, err = run(["/bin/sh", "-c", self.script])
        return rc, err.strip()


# --- what the node looks like, before and after -------------------------------------------


def root_qdisc(iface: str) -> tuple[str, str]:
    """(kind, handle) of IFACE's root qdisc, like ("fq_codel", "0:")."""
    rc, out, _ = run(["tc", "qdisc", "show", "dev", iface, "root"])
    if rc != 0:
        return "", ""
    for line in out.splitlines():
        found = _ROOT_QDISC.match(line.strip())
        if found:
            return found.group(1), found.group(2)
    return "", ""


def bonds(root: str = "/proc/net/bonding") -> list[dict[str, Any]]:
    """Every bond of the node: name, mode, active member, members up or down, read the way the
    nic_bond role reads them (bonding.parse)."""
    found = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    for name in names:
        try:
            with open(os.path.join(root, name), encoding="utf-8") as handle:
                report = parse_bond(handle.read())
        except OSError:
            continue
        if not report["exists"]:
            continue
        found.append({
            "name": name,
            "mode": report["mode"] or "",
            # "None" when no member is active: never a member a drill could fail over to
            "active": report["active"] if report["active"] in report["members"] else "",
            "miimon_ms": _int(report["miimon"]),
            "arp_ms": _int(report["arp_interval"]),
            "members": {m: "up" if m in report["up"] else "down" for m in report["members"]},
        })  # fmt: skip
    return found


def _int(text: str | None) -> int:
    return int(text) if text and text.isdigit() else 0


def default_iface() -> str:
    rc, out, _ = run(["ip", "-o", "route", "show", "default"])
    found = re.search(r" dev (\S+)", out) if rc == 0 else None
    return found.group(1) if found else ""


def tc_hooks(iface: str) -> bool:
    """Whether IFACE has a clsact or ingress qdisc (where tc filters drop its traffic)."""
    rc, out, _ = run(["tc", "qdisc", "show", "dev", iface])
    return rc == 0 and re.search(r"^qdisc (clsact|ingress) ", out, re.M) is not None


def snapshot(iface: str = "") -> dict[str, Any]:
    """What an undo must leave as it was: the root qdisc, the bonds' members' link state and
    which members carry tc filter hooks (the blackhole drill's)."""
    found = bonds()
    state: dict[str, Any] = {
        "members_up": {b["name"]: sorted(m for m, s in b["members"].items() if s == "up")
                       for b in found},
        "tc_hooks": sorted(m for b in found for m in b["members"] if tc_hooks(m)),
    }  # fmt: skip
    if iface:
        state["qdisc"] = list(root_qdisc(iface))
    return state


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What is not as it was, one phrase each (empty: the node is as it was)."""
    out = []
    if before.get("qdisc") != after.get("qdisc"):
        out.append(f"root qdisc {after.get('qdisc')} where it was {before.get('qdisc')}")
    if before.get("tc_hooks", []) != after.get("tc_hooks", []):
        out.append(f"tc filter hooks on {after.get('tc_hooks')} where they were on "
                   f"{before.get('tc_hooks')}")  # fmt: skip
    for bond, members in before.get("members_up", {}).items():
        now = after.get("members_up", {}).get(bond, [])
        if members != now:
            out.append(f"bond {bond} members up {now} where they were {members}")
    return out


# --- the drills -----------------------------------------------------------------------------


class Job:
    """What a drill needs of the running job; the module fills it from its own view."""

    def __init__(
        self,
        run_dir: str,
        user: str,
        interval: int,
        alive: Callable[[], bool],
        workers: Callable[[], list[int]],
        committed: Callable[[], int | None],
        emergencies: Callable[[], int],
        sessions: Callable[[], set[str]] = set,
        newest: Callable[[str], dict[str, Any] | None] = lambda _name: None,
    ) -> None:
        self.run_dir = run_dir
        self.log = os.path.join(run_dir, "train.log")
        self.user = user
        self.interval = interval
        self.alive = alive
        self.workers = workers
        self.committed = committed
        self.emergencies = emergencies
        self.sessions = sessions
        self.newest = newest  # a checkpoint by name ("": the newest): step, bytes, verified


def _result(fault: str, job: Job, **fields: Any) -> dict[str, Any]:
    limit = STEPS_LOST_LIMIT[fault]
    result: dict[str, Any] = {
        "fault": fault, "detected_by": "", "detect_s": None, "checkpoint_s": None,
        "steps_lost": None, "next_step_s": None, "step_at_fault": None,
        "committed_at_fault": None, "resumed_from": None, "restored": True, "left": [],
        "steps_lost_limit": job.interval if limit is None else limit, "problems": [],
        "detail": "", "skipped": False,
    }  # fmt: skip
    result.update(fields)
    return result


def _wait_step(
    job: Job, timeline: Timeline, watch: LogWatch, after: float, timeout: float
) -> tuple[int, float] | None:
    """The first step the job makes at or after AFTER (its t=), waiting up to TIMEOUT."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        timeline.feed(watch.poll())
        found = timeline.next_step_after(after)
        if found is not None:
            return found
        time.sleep(0.05)
    return None


def _judge(result: dict[str, Any]) -> dict[str, Any]:
    problems = result["problems"]
    lost = result["steps_lost"]
    if lost is None:
        problems.append("the steps lost could not be measured")
    elif lost > result["steps_lost_limit"]:
        problems.append(f"{lost} step(s) lost, more than the limit {result['steps_lost_limit']}")
    if result["next_step_s"] is None:
        problems.append("the job made no step after the fault")
    if not result["restored"]:
        problems.append("the node is not as it was: " + "; ".join(result["left"]))
    result["passed"] = not problems
    return result


def _settle(job: Job, watch: LogWatch, timeout: float) -> tuple[int, float]:
    """Wait for the job to make a step now (it is training), then return (step, its t=)."""
    timeline = Timeline(time.time())
    found = _wait_step(job, timeline, watch, time.time() - 0.001, timeout)
    if found is None or not job.alive():
        raise DrillError(
            f"the job in {job.run_dir} made no step for {timeout:g} s before the fault; a drill "
            "needs a job that is training (see `nodeprep status`)."
        )
    return found


def _kill_moment(job: Job, timeout_s: float) -> None:
    """Wait for the moment to kill: a random step in the first half of an interval whose
    checkpoint is committed. Before the first checkpoint a kill would cost the whole run and
    prove no resume; while the next one is being written it would cost more than the
    interval. Where the interval allows, at least two steps after this node's commit: in a
    job whose nodes each keep their own copy, the other nodes' writers commit the same step
    on their own, and the job resumes from the newest step every node holds."""
    deadline = time.time() + timeout_s
    latest = max(1, job.interval // 2)
    offset = random.randint(min(2, latest), latest)
    while time.time() < deadline:
        committed, now = job.committed(), last_step(job.log, 16384)
        half = committed + max(2, job.interval // 2 + 1) if committed is not None else 0
        if committed is not None and now is not None and committed + offset <= now[0] < half:
            return
        time.sleep(0.02)
    raise DrillError(
        f"the job in {job.run_dir} committed no checkpoint it could be killed after within "
        f"{timeout_s:g} s; the kill drill needs one to resume from (see --checkpoint-every)."
    )


def drill_kill(job: Job, drill_id: str, duration_s: float, timeout_s: float) -> dict[str, Any]:
    """SIGKILL one rank at a step; torchrun restarts the group, which resumes from the newest
    committed checkpoint. Cost: the steps since that checkpoint."""
    del drill_id, duration_s
    watch = LogWatch(job.log)
    _settle(job, watch, timeout_s)
    _kill_moment(job, timeout_s)
    pids = job.workers()
    if not pids:
        raise DrillError(f"no rank of the job in {job.run_dir} was found to kill.")
    committed = job.committed()
    victim = random.choice(pids)
    before = last_step(job.log)
    fault_time = time.time()
    os.kill(victim, 9)
    timeline = Timeline(fault_time)
    deadline = time.time() + timeout_s
    while time.time() < deadline and timeline.resumed_from is None:
        timeline.feed(watch.poll())
        time.sleep(0.05)
    step_at_fault = before[0] if before else None
    result = _result("kill", job, step_at_fault=step_at_fault, committed_at_fault=committed,
                     detail=f"SIGKILL to rank pid {victim}")  # fmt: skip
    if timeline.torchrun_saw is not None:
        result["detected_by"] = "torchrun"
        result["detect_s"] = round(timeline.torchrun_saw - fault_time, 2)
    if timeline.resumed_from is None:
        result["problems"].append(f"the job did not resume within {timeout_s:g} s")
        return _judge(result)
    result["resumed_from"] = timeline.resumed_from
    if not timeline.resumed:
        result["problems"].append("the job started again from scratch, not from a checkpoint")
    elif committed is not None and timeline.resumed_from < committed:
        result["problems"].append(
            f"the job resumed from step {timeline.resumed_from}, older than the newest "
            f"committed checkpoint ({committed})"
        )
    if step_at_fault is not None:
        result["steps_lost"] = max(0, step_at_fault - timeline.resumed_from)
    end = time.time() + timeout_s
    while time.time() < end and not timeline.after_resume:  # a step of the restarted group
        timeline.feed(watch.poll())
        time.sleep(0.05)
    if timeline.after_resume:
        result["next_step_s"] = round(timeline.after_resume[0][1] - fault_time, 2)
    return _judge(result)


def _ride(
    watch: LogWatch, timeline: Timeline, fault_time: float, duration_s: float, limit_s: float,
    watch_fault: Callable[[float], Any] | None, until: Callable[[], bool] | None,
) -> Any:  # fmt: skip
    """Let the fault last DURATION_S from the end of its injection (a fill may take a while),
    and, with UNTIL, on until it says so or LIMIT_S; what WATCH_FAULT first saw."""
    injected = time.time()
    end, limit = injected + duration_s, injected + limit_s
    detected: Any = None
    while True:
        done = until() if until is not None else True  # looked at every turn, for its times
        now = time.time()
        if now >= limit or (now >= end and done):
            return detected
        timeline.feed(watch.poll())
        if watch_fault is not None and detected is None:
            detected = watch_fault(fault_time)
        time.sleep(0.02)


def _steady(
    fault: str, job: Job, inject: Callable[[], None], undo: Undo, duration_s: float,
    timeout_s: float, iface: str, detail: str, watch_fault: Callable[[float], Any] | None = None,
    until: Callable[[], bool] | None = None, trip_ok: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """A fault the job must ride out: no restart, no trip, no step lost."""
    watch = LogWatch(job.log)
    _settle(job, watch, timeout_s)
    before_node = snapshot(iface)
    before_step = last_step(job.log)
    committed = job.committed()
    trips = job.emergencies()
    undo.arm()
    fault_time = time.time()
    timeline = Timeline(fault_time)
    try:
        inject()
        limit_s = max(duration_s, timeout_s)
        detected = _ride(watch, timeline, fault_time, duration_s, limit_s, watch_fault, until)
    finally:
        rc, err = undo.now()
    undone_at = time.time()
    result = _result(fault, job, step_at_fault=before_step[0] if before_step else None,
                     committed_at_fault=committed, detail=detail)  # fmt: skip
    if rc != 0:
        result["problems"].append(f"the undo failed: {err}")
    if detected is not None:
        result["detected_by"], result["detect_s"] = detected
    nxt = _wait_step(job, timeline, watch, fault_time, timeout_s)
    if nxt is not None:
        result["next_step_s"] = round(nxt[1] - fault_time, 2)
    timeline.feed(watch.poll())
    if timeline.restarts:
        result["resumed_from"] = timeline.resumed_from
        if before_step is not None and timeline.resumed_from is not None:
            result["steps_lost"] = max(0, before_step[0] - timeline.resumed_from)
        result["problems"].append("the job restarted during the fault")
    else:
        result["steps_lost"] = 0
    if job.emergencies() > trips and not trip_ok:
        result["problems"].append("the heartbeat tripped (an emergency checkpoint was taken)")
    if not job.alive():
        result["problems"].append("the job is no longer running")
    settle_until = undone_at + SETTLE_S
    left = differences(before_node, snapshot(iface))
    while left and time.time() < settle_until:  # a member that was brought up needs its MII
        time.sleep(0.2)
        left = differences(before_node, snapshot(iface))
    result["restored"], result["left"] = not left, left
    return _judge(result)


def _load(path: str) -> dict[str, Any]:
    """A JSON object from PATH ({} when it is missing, unreadable or not an object)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _probes(config: str, kind: str) -> list[dict[str, Any]]:
    probes = _load(config).get("probes")
    return [p for p in probes if isinstance(p, dict) and p.get("type") == kind] if isinstance(
        probes, list) else []  # fmt: skip


def notice_probe(config: str = HEARTBEAT_CONFIG) -> dict[str, Any] | None:
    """The heartbeat's cloud-notice probe (type spot_notice) from its config, if it has one."""
    found = _probes(config, "spot_notice")
    return found[0] if found else None


def standin(record: str = STANDIN_RECORD) -> dict[str, Any] | None:
    """The metadata stand-in serving on this node: its record, while its process lives."""
    data = _load(record)
    try:
        os.kill(int(data["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError, OverflowError):
        return None
    return data if data.get("notice_file") else None


def _host(url: Any) -> str:
    return urlsplit(str(url or "")).hostname or ""


def _num(record: dict[str, Any], key: str) -> float | None:
    """A record's number, or None where it is missing or not a number."""
    try:
        return float(record[key])
    except (KeyError, TypeError, ValueError):
        return None


def emergency_records(run_dir: str, start: int) -> list[dict[str, Any]]:
    """The job's emergency checkpoint records from line START on (emergency.jsonl)."""
    try:
        with open(os.path.join(run_dir, "emergency.jsonl"), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines[start:]:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            found.append(record)
    return found


def _skipped(fault: str, job: Job, why: str) -> dict[str, Any]:
    result = _result(fault, job, detail=why, skipped=True)
    result["passed"] = None  # neither: nothing was drilled, and a skip is no pass
    return result


def _notice_target(job: Job, config: str, record: str) -> tuple[str, dict[str, Any]]:
    """(provider, the stand-in's record) for a notice this drill can post; DrillError where
    nothing would read a notice; ("", skip result) where only the cloud could post one."""
    probe = notice_probe(config)
    if probe is None:
        raise DrillError(
            f"the heartbeat on this node watches no cloud interruption notice (no spot_notice "
            f"probe in {config}), so a notice would reach nobody; provision the heartbeat on a "
            "cloud VM or with heartbeat_cloud set (on the lab, start the metadata stand-in "
            "first: `nodeprep lab metadata NODE up`)."
        )
    provider = str(probe.get("provider") or "aws")
    url = probe.get("url") or METADATA_URL
    served = standin(record)
    if served is None or _host(served.get("url")) != _host(url):
        how = PROVIDER_DRILLS.get(provider, "the provider's own fault-injection service")
        return "", _skipped("preempt", job, (
            f"the heartbeat watches {provider}'s own metadata service ({url}), where no drill "
            f"can post a real notice; drill a reclaim with {how}"
        ))  # fmt: skip
    if served.get("provider") != provider:
        raise DrillError(
            f"the metadata stand-in on this node looks like {served.get('provider')}'s, but the "
            f"heartbeat reads it as {provider}'s, so it would not understand the notice; start "
            f"the stand-in as {provider} (`nodeprep lab metadata NODE up --provider {provider}`)."
        )
    _rc, out, _err = run(["systemctl", "is-active", "nodeprep-heartbeat"])
    if out.strip() != "active":
        raise DrillError(
            f"the heartbeat is not running on this node (nodeprep-heartbeat is "
            f"{out.strip() or 'unknown'}), so the notice would reach nobody; start it first."
        )
    return provider, served


def _trip_quiet(config: str, metrics: str, timeout_s: float) -> None:
    """Wait out the heartbeat's min_trip_interval_s after its last trip (an earlier drill's),
    in which it would not act on the notice."""
    actions = _load(config).get("actions")
    quiet = _num(actions, "min_trip_interval_s") if isinstance(actions, dict) else None
    quiet = 30.0 if quiet is None else quiet
    try:
        with open(metrics, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return
    found = re.search(r'^nodeprep_heartbeat_last_action_timestamp_seconds\{action="trip"\} (\S+)',
                      text, re.M)  # fmt: skip
    if found:
        try:
            wait = float(found.group(1)) + quiet + 1 - time.time()
        except ValueError:
            return
        time.sleep(min(max(0.0, wait), timeout_s))


class _Reclaim:
    """What the node showed between the notice and the job's exit."""

    def __init__(self, job: Job, watch: LogWatch, seen: int) -> None:
        self.job, self.watch, self.seen = job, watch, seen
        self.fault_time = time.time()
        self.timeline = Timeline(self.fault_time)
        self.term_time = self.fault_time
        self.trip: dict[str, Any] | None = None
        self.signalled: list[int] = []
        self.stopped = False
        self.reached: tuple[int, float] | None = None
        self.saves: list[dict[str, Any]] = []

    def _notice_save(self) -> dict[str, Any] | None:
        """The first emergency checkpoint asked for after the notice (not by a SIGTERM)."""
        for record in emergency_records(self.job.run_dir, self.seen):
            signalled = _num(record, "signal_time")
            late = signalled is not None and signalled >= self.fault_time
            if record.get("signal") != "SIGTERM" and late and _num(record, "committed_time"):
                return record
        return None

    def notice_then_sigterm(
        self, notice: str, text: str, duration_s: float, timeout_s: float,
        terminate: Callable[[], list[int]],
    ) -> None:  # fmt: skip
        try:
            with open(notice, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise DrillError(
                f"cannot post the notice at {notice}, the file the metadata stand-in reads "
                f"({exc.strerror}); serve the stand-in again (`nodeprep lab metadata NODE up`)."
            ) from None
        self.fault_time = time.time()  # the notice is there from now
        self.timeline = Timeline(self.fault_time)
        while time.time() < self.fault_time + duration_s:
            self.timeline.feed(self.watch.poll())
            if self.trip is None:
                self.trip = self._notice_save()
            time.sleep(0.05)
        self.term_time = time.time()
        self.signalled = terminate()
        while time.time() < self.term_time + timeout_s and self.job.alive():
            self.timeline.feed(self.watch.poll())
            time.sleep(0.1)
        self.stopped = not self.job.alive()
        self.timeline.feed(self.watch.poll())
        self.reached = last_step(self.job.log)
        self.saves = emergency_records(self.job.run_dir, self.seen)

    def detail(self, provider: str, url: Any) -> str:
        grace = self.term_time - self.fault_time
        said = [f"notice posted at the {provider} stand-in ({url}), SIGTERM {grace:.1f} s "
                f"later to pid(s) {self.signalled}"]  # fmt: skip
        if self.trip is not None:
            said.append(f"the notice's checkpoint: step {self.trip.get('step')} "
                        f"({self.trip.get('signal')})")  # fmt: skip
        term = next((r for r in self.saves if r.get("signal") == "SIGTERM"), None)
        committed = _num(term, "committed_time") if term is not None else None
        if term is not None and committed is not None:
            after = committed - self.term_time
            said.append(f"the SIGTERM's: step {term.get('step')}, committed {after:.2f} s after it")
        return "; ".join(said)


def drill_preempt(
    job: Job, drill_id: str, duration_s: float, timeout_s: float,
    terminate: Callable[[], list[int]], revive: str,
    config: str = HEARTBEAT_CONFIG, record: str = STANDIN_RECORD, metrics: str = "",
) -> dict[str, Any]:  # fmt: skip
    """A spot reclaim as the node sees it: the cloud's interruption notice appears where the
    heartbeat probes, then SIGTERM reaches the job DURATION_S later (the notice's warning,
    shortened). The job is then started again, as on the replacement node, and must resume
    from the checkpoint the notice or the SIGTERM made: at most one step lost.

    REVIVE is a shell command that starts the job again when its session is dead (the
    undo runs it too, so a lost drill still leaves the job running)."""
    provider, served = _notice_target(job, config, record)
    if not provider:
        return served  # the skip
    notice = str(served["notice_file"])
    if metrics:
        _trip_quiet(config, metrics, timeout_s)
    watch = LogWatch(job.log)
    _settle(job, watch, timeout_s)
    committed = job.committed()
    undo = Undo(drill_id, f"rm -f {shlex.quote(notice)}; {revive}",
                duration_s + 2 * timeout_s + 5, "preempt")  # fmt: skip
    reclaim = _Reclaim(job, watch, job.emergencies())
    undo.arm()
    try:
        reclaim.notice_then_sigterm(notice, f"posted by nodeprep drill {drill_id}\n",
                                    duration_s, timeout_s, terminate)  # fmt: skip
    finally:
        if reclaim.stopped or not reclaim.signalled:
            rc, err = undo.now()  # the notice goes; the job starts again
        else:  # still stopping: the armed timer starts it again once it is down
            rc, err = run(["rm", "-f", notice])[0], ""
    reached, trip = reclaim.reached, reclaim.trip
    result = _result("preempt", job, step_at_fault=reached[0] if reached else None,
                     committed_at_fault=committed,
                     detail=reclaim.detail(provider, served.get("url")))  # fmt: skip
    if rc != 0:
        result["problems"].append(f"the undo failed: {err}")
    signalled = _num(trip, "signal_time") if trip is not None else None
    saved = _num(trip, "committed_time") if trip is not None else None
    if signalled is not None and saved is not None:
        result["detected_by"] = "heartbeat"
        result["detect_s"] = round(signalled - reclaim.fault_time, 3)
        result["checkpoint_s"] = round(saved - signalled, 3)
    else:
        result["problems"].append(
            f"no emergency checkpoint was committed within the notice's {duration_s:g} s: the "
            "heartbeat did not trip, or the trainer did not save"
        )
    if not reclaim.stopped:
        result["problems"].append(
            f"the job did not stop within {timeout_s:g} s of SIGTERM; its undo timer starts it "
            "again once it has"
        )
        result["restored"], result["left"] = False, ["the job still stopping"]
        result["passed"] = False
        return result
    last = reclaim.reached[0] if reclaim.reached else None  # the step reached before the exit
    _came_back(result, reclaim.timeline, reclaim.watch, last, timeout_s, "", reclaim.term_time)
    left = [f"the notice {notice} is still there"] if os.path.exists(notice) else []
    if not job.alive():
        left.append("the job is not running")
    result["restored"], result["left"] = not left, left
    result["detail"] += "; next step timed from the SIGTERM"
    return _judge(result)


def netem_iface() -> str:
    """Where netem goes: the node's bond (the training network), else the default route's."""
    found = bonds()
    return found[0]["name"] if found else default_iface()


def drill_netem(
    job: Job, drill_id: str, duration_s: float, timeout_s: float, delay_ms: int, loss_pct: float
) -> dict[str, Any]:
    """Delay and loss on the training network for DURATION_S: slower steps, no failure."""
    iface = netem_iface()
    if not iface:
        raise DrillError("the node has neither a bond nor a default route to slow down.")
    kind, handle = root_qdisc(iface)
    if handle not in ("", "0:"):
        raise DrillError(
            f"{iface} has a configured root qdisc ({kind} {handle}); the netem drill would "
            "replace it, so it refuses: drill a node whose root qdisc is the kernel's default."
        )
    quoted = shlex.quote(iface)
    undo = Undo(
        drill_id,
        f"if tc qdisc show dev {quoted} root | grep -q '^qdisc netem'; then "
        f"tc qdisc del dev {quoted} root; fi",
        duration_s + 5,
        "netem",
    )

    def inject() -> None:
        rc, _out, err = run(["tc", "qdisc", "add", "dev", iface, "root", "netem", "delay",
                             f"{delay_ms}ms", "loss", f"{loss_pct:g}%"])  # fmt: skip
        if rc != 0:
            raise DrillError(f"tc could not add netem on {iface}: {err.strip()}")

    detail = f"netem delay {delay_ms} ms loss {loss_pct:g}% on {iface} for {duration_s:g} s"
    return _steady("netem", job, inject, undo, duration_s, timeout_s, iface, detail)


def _monitor(bond: dict[str, Any]) -> str:
    if bond.get("arp_ms"):
        return f"ARP monitoring every {bond['arp_ms']} ms"
    return f"miimon {bond['miimon_ms']} ms"


def _failover_bond(fault: str) -> dict[str, Any]:
    """The first bond with an active member and a second member up, or a refusal."""
    usable = [b for b in bonds() if b["active"] and list(b["members"].values()).count("up") >= 2]
    if not usable:
        raise DrillError(
            "the node has no bond with two members up (apply the nic_bond role with two NICs); "
            f"the {fault} drill would cut it off instead of failing over."
        )
    return usable[0]


def _still_active(bond: dict[str, Any], member: str) -> None:
    """Refuse when the bond failed over while the drill waited for a step: the fault would
    land on what is now a backup member."""
    now = next((b["active"] for b in bonds() if b["name"] == bond["name"]), "")
    if now != member:
        raise DrillError(
            f"bond {bond['name']} failed over from {member} to {now or 'no member'} before the "
            "fault; drill again once the bond is steady (see nodeprep verify --checks nic_bond)."
        )


def _failed_over(bond: dict[str, Any], member: str) -> Callable[[float], Any]:
    def seen(fault_time: float) -> tuple[str, float] | None:
        for found in bonds():
            if found["name"] == bond["name"] and found["active"] not in ("", member):
                return "bond", round(time.time() - fault_time, 3)
        return None

    return seen


def drill_link(job: Job, drill_id: str, duration_s: float, timeout_s: float) -> dict[str, Any]:
    """The bond's active member down for DURATION_S: the bond fails over, training goes on."""
    bond = _failover_bond("link")
    member = bond["active"]
    undo = Undo(drill_id, f"ip link set dev {shlex.quote(member)} up", duration_s + 5, "link")

    def inject() -> None:
        _still_active(bond, member)
        rc, _out, err = run(["ip", "link", "set", "dev", member, "down"])
        if rc != 0:
            raise DrillError(f"ip could not take {member} down: {err.strip()}")

    detail = (f"{member} (active member of {bond['name']}, {_monitor(bond)}) down "
              f"for {duration_s:g} s")  # fmt: skip
    result = _steady("link", job, inject, undo, duration_s, timeout_s, "", detail,
                     _failed_over(bond, member))  # fmt: skip
    if result["detected_by"] != "bond":
        result["problems"].append(f"bond {bond['name']} did not fail over from {member}")
        result["passed"] = False
    return result


def drill_blackhole(job: Job, drill_id: str, duration_s: float, timeout_s: float) -> dict[str, Any]:
    """Every frame the bond's active member sends or receives dropped for DURATION_S while
    its link stays up: only a bond that probes its peers (ARP monitoring) fails over; MII
    monitoring watches the carrier, which stays up.

    The drops are tc filters on the member's clsact qdisc (ingress and egress, matchall,
    action drop): iproute2 is on every node that has a bond, where nftables often is not,
    and a netdev-family nftables rule would drop at the same two hooks."""
    bond = _failover_bond("blackhole")
    member = bond["active"]
    if tc_hooks(member):
        raise DrillError(
            f"{member} already has a clsact or ingress qdisc; the "
            "blackhole drill would remove it with its own, so it refuses: drill a node whose "
            "bond members carry no tc filters."
        )
    quoted = shlex.quote(member)
    undo = Undo(
        drill_id,
        f"if tc qdisc show dev {quoted} | grep -q '^qdisc clsact '; then "
        f"tc qdisc del dev {quoted} clsact; fi",
        duration_s + 5,
        "blackhole",
    )

    def inject() -> None:
        _still_active(bond, member)
        for argv in (["tc", "qdisc", "add", "dev", member, "clsact"],
                     ["tc", "filter", "add", "dev", member, "ingress", "matchall", "action",
                      "drop"],
                     ["tc", "filter", "add", "dev", member, "egress", "matchall", "action",
                      "drop"]):  # fmt: skip
            rc, _out, err = run(argv)
            if rc != 0:
                raise DrillError(f"tc could not drop {member}'s traffic ({' '.join(argv[1:4])}): "
                                 f"{err.strip()}")  # fmt: skip

    detail = (f"every frame of {member} (active member of {bond['name']}, {_monitor(bond)}) "
              f"dropped for {duration_s:g} s, its link up")  # fmt: skip
    result = _steady("blackhole", job, inject, undo, duration_s, timeout_s, "", detail,
                     _failed_over(bond, member))  # fmt: skip
    if result["detected_by"] != "bond":
        why = ("MII monitoring watches the carrier only, and the link stayed up; set "
               "nic_bond_arp_interval (and nic_bond_arp_ip_targets) so that the bond probes "
               "its peer" if not bond.get("arp_ms") else
               f"its ARP monitoring (every {bond['arp_ms']} ms) did not see the loss; check "
               "the ARP targets and arp_validate")  # fmt: skip
        result["problems"].append(f"bond {bond['name']} did not notice: {why}")
        result["passed"] = False
    return result


def mount_point(path: str) -> str:
    """The mount point of the filesystem that holds PATH."""
    path = os.path.realpath(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def mount_info(mount: str, mountinfo: str = "/proc/self/mountinfo") -> tuple[str, str]:
    """(major:minor, type) of the filesystem mounted at MOUNT (the last mount there wins)."""
    found = ("", "")
    try:
        with open(mountinfo, encoding="utf-8") as handle:
            for line in handle:
                fields = line.split()
                if "-" not in fields[6:]:
                    continue
                cut = fields.index("-", 6)
                if len(fields) > cut + 1 and fields[4].replace("\\040", " ") == mount:
                    found = (fields[2], fields[cut + 1])
    except OSError:
        pass
    return found


def free_space_probes(config: str = HEARTBEAT_CONFIG) -> list[tuple[str, str]]:
    """(name, path) of each free_space probe in the heartbeat's config."""
    return [(str(p.get("name")), str(p.get("path"))) for p in _probes(config, "free_space")
            if p.get("path")]  # fmt: skip


def grown_paths(config: str = HEARTBEAT_CONFIG) -> list[str]:
    """The paths of the volumes the heartbeat's growth action may grow."""
    grow = _load(config).get("grow")
    volumes = grow.get("volumes") if isinstance(grow, dict) else None
    return [str(v["path"]) for v in volumes if isinstance(v, dict) and v.get("path")] if (
        isinstance(volumes, list)) else []  # fmt: skip


def probes_down(metrics: str) -> set[str]:
    """The free_space probes the heartbeat's metrics textfile says failed last."""
    try:
        with open(metrics, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return set()
    return {m.group(1) for m in map(_PROBE_DOWN.match, text.splitlines()) if m}


# What the disk-full drill fills: a local filesystem that is not the node's own.
FILLABLE = ("ext4", "ext3", "xfs", "btrfs")
SYSTEM_MOUNTS = ("/", "/boot", "/home", "/tmp", "/usr", "/var", "/var/lib", "/var/log", "/opt")


def _fillable(root: str, config: str) -> str:
    """The mount point of ROOT's filesystem where the drill may fill it; DrillError naming
    why not where it may not."""
    mount = mount_point(root)
    device, kind = mount_info(mount)
    if kind not in FILLABLE:
        raise DrillError(
            f"the checkpoints ({root}) are on {kind or 'an unknown filesystem'} at {mount}; the "
            f"disk-full drill fills only a local {', '.join(FILLABLE)} filesystem (filling a "
            "network one would starve other nodes, a tmpfs the node's memory)."
        )
    if mount in SYSTEM_MOUNTS or (device and device == mount_info("/")[0]):
        raise DrillError(
            f"the checkpoints ({root}) are on the node's system filesystem ({mount}); filling "
            "it would starve the node's own services (the journal, sshd, package updates); "
            "drill disk-full on a job whose run dir is on a data disk."
        )
    grown = [path for path in grown_paths(config) if mount_point(path) == mount]
    if grown:
        raise DrillError(
            f"the heartbeat's growth action may grow the volume at {mount} ({grown[0]} is in "
            f"grow.volumes of {config}); a fill would make it grow the volume for real, which "
            "cannot be undone; drill disk-full on a filesystem it does not grow."
        )
    return mount


class _Fill:
    """What the disk-full drill saw while the checkpoint filesystem was full."""

    def __init__(self, watch: LogWatch, watched: list[str], metrics: str) -> None:
        self.watch, self.watched, self.metrics = watch, watched, metrics
        self.down_before: set[str] = set()  # already down before the fill: no report
        self.failed: tuple[float, str] | None = None  # when, the trainer's line
        self.reported: tuple[float, str] | None = None  # when, the heartbeat's probe
        self.committed_then: int | None = None

    def look(self, job: Job) -> bool:
        """True once the fault has shown what it must: a failed save (and the heartbeat's
        report where it watches the filesystem)."""
        for seen, line in self.watch.poll():
            if self.failed is None and _SAVE_FAILED.search(line):
                self.failed = (seen, line.strip())
                self.committed_then = job.committed()
        if self.watched and self.reported is None:
            down = (probes_down(self.metrics) & set(self.watched)) - self.down_before
            if down:
                self.reported = (time.time(), sorted(down)[0])
        return self.failed is not None and (self.reported is not None or not self.watched)

    def judge(self, newest: dict[str, Any], mount: str, said: list[str]) -> list[str]:
        problems = []
        if self.failed is None:
            problems.append("no save failed while the disk was full")
        else:
            line = self.failed[1]
            start = max(0, line.find("saving checkpoint"))
            said.append(f"the trainer: {line[start : start + 220]}")
            if self.committed_then is not None and self.committed_then < int(newest["step"]):
                problems.append(f"the newest checkpoint went from step {newest['step']} to "
                                f"{self.committed_then}")  # fmt: skip
        if self.reported is not None:
            said.append(f"the heartbeat's {self.reported[1]} probe reported it")
        elif self.watched and set(self.watched) <= self.down_before:
            said.append(f"the heartbeat's {', '.join(self.watched)} probe(s) were down already")
        elif self.watched:
            problems.append(
                f"the heartbeat's free-space probe(s) {', '.join(self.watched)} did not report it"
            )
        else:
            said.append(f"the heartbeat watches no free space on {mount}")
        return problems


def drill_disk_full(
    job: Job, drill_id: str, duration_s: float, timeout_s: float, metrics: str,
    config: str = HEARTBEAT_CONFIG,
) -> dict[str, Any]:  # fmt: skip
    """Fill the checkpoint filesystem until less than one checkpoint fits: the next save
    fails clearly, the newest checkpoint stays and verifies, the heartbeat's free-space probe
    on that filesystem (where it has one) reports it; the fill goes and the next save
    commits. Training goes on throughout: no step lost."""
    root = os.path.join(job.run_dir, "checkpoints")
    newest = job.newest("")
    if not newest or not newest.get("bytes"):
        raise DrillError(
            f"the job in {job.run_dir} has no committed checkpoint yet; the disk-full drill sizes "
            "its fill by one and checks it stays (see --checkpoint-every)."
        )
    mount = _fillable(root, config)
    fill = os.path.join(root, FILL_PREFIX + drill_id)  # not a checkpoint's name: never read
    keep = int(newest.get("smallest") or newest["bytes"]) // 2  # less than any save fits
    watched = [name for name, path in free_space_probes(config) if mount_point(path) == mount]
    undo = Undo(drill_id, f"rm -f {shlex.quote(fill)}", max(duration_s, timeout_s) + 30,
                "disk-full")  # fmt: skip
    seen = _Fill(LogWatch(job.log), watched, metrics)
    filled: list[tuple[int, float]] = []  # bytes, when

    def inject() -> None:
        seen.down_before = probes_down(metrics) & set(watched)
        stat = os.statvfs(root)
        free = stat.f_bfree if job.user == "root" else stat.f_bavail  # root writes the reserve
        size = free * stat.f_frsize - keep
        if size <= 0:
            raise DrillError(f"{mount} has less than one checkpoint free already; free space.")
        fd = os.open(fill, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            if os.fstat(fd).st_dev != os.stat(root).st_dev:
                raise DrillError(f"the fill {fill} is not on the checkpoints' filesystem.")
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            raise DrillError(f"cannot fill {mount} with fallocate: {exc}") from exc
        finally:
            os.close(fd)
        filled.append((size, time.time()))

    result = _steady("disk-full", job, inject, undo, duration_s, timeout_s, "",
                     f"{mount} filled", until=lambda: seen.look(job), trip_ok=True)  # fmt: skip
    size, filled_at = filled[0] if filled else (0, time.time())
    step, nbytes = newest.get("step"), newest.get("bytes")
    said = [f"{mount} filled with {size / 2**30:.2f} GiB ({fill}) leaving {keep} bytes, under "
            f"half a checkpoint (the newest: step {step}, {nbytes} bytes)"]  # fmt: skip
    problems = result["problems"]
    problems += seen.judge(newest, mount, said)
    if seen.failed is not None:
        result["detected_by"] = "trainer"
        result["detect_s"] = round(seen.failed[0] - filled_at, 2)
    problems += _space_back(job, str(newest.get("name") or ""), timeout_s, said)
    if os.path.exists(fill):
        result["left"].append(f"the fill {fill} is still there")
        result["restored"] = False
        problems.append(f"the node is not as it was: the fill {fill} is still there")
    result["detail"] = "; ".join(said)
    result["passed"] = not problems
    return result


def _space_back(job: Job, name: str, timeout_s: float, said: list[str]) -> list[str]:
    """After the fill: the checkpoint that was newest verifies, and the next save commits."""
    problems = []
    kept = job.newest(name)
    if not kept or not kept.get("verified"):
        problems.append(f"checkpoint {name} does not verify after the fault: {kept}")
    before = job.committed() or 0
    deadline = time.time() + timeout_s
    while time.time() < deadline and (job.committed() or 0) <= before:
        time.sleep(0.2)
    after = job.committed()
    if after is None or after <= before:
        problems.append(f"no save committed within {timeout_s:g} s of the space's return")
    else:
        said.append(f"the next save committed step {after}")
    return problems


def _sessions(user: str) -> list[str]:
    """The ids of USER's logind sessions."""
    rc, out, _ = run(["loginctl", "list-sessions", "--no-legend"])
    rows = [line.split() for line in out.splitlines()] if rc == 0 else []
    return [fields[0] for fields in rows if len(fields) >= 3 and fields[2] == user]


def session_of(pid: int) -> str:
    """The logind session whose scope holds PID ("" when it is in none, like a service)."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return ""
    found = re.search(r"/session-([^/.]+)\.scope", text)
    return found.group(1) if found else ""


def _own_session() -> str:
    try:
        with open("/proc/self/sessionid", encoding="utf-8") as handle:
            audit = handle.read().strip()
    except OSError:
        audit = ""
    rc, out, _ = run(["loginctl", "show-session", "self", "-p", "Id", "--value"])
    if rc == 0 and out.strip():
        return out.strip()
    return audit if audit and audit != "4294967295" else ""  # (uint32)-1: no audit session


def drill_ssh_drop(job: Job, drill_id: str, duration_s: float, timeout_s: float) -> dict[str, Any]:
    """End every login session of the job's user (SSH, console), except the drill's own."""
    own = _own_session()
    if not own:
        raise DrillError(
            "the drill's own login session cannot be found (no logind session), so ending "
            "the user's sessions could end the drill itself; drills need systemd-logind."
        )
    holding = job.sessions()  # a session whose scope holds the job would take the job along
    ended: list[str] = []

    def inject() -> None:
        for session in _sessions(job.user):
            if session != own and session not in holding:
                run(["loginctl", "terminate-session", session])
                ended.append(session)

    undo = Undo(drill_id, "true", duration_s + 5, "ssh-drop")  # nothing to put back: a login ends
    result = _steady("ssh-drop", job, inject, undo, duration_s, timeout_s, "",
                     f"login sessions of {job.user} ended")  # fmt: skip
    which = ", ".join(ended) or "none was open but the drill's own"
    result["detail"] = f"{len(ended)} login session(s) of {job.user} ended ({which}); the " + (
        "drill's own session kept"
    )
    if holding:
        result["detail"] += (
            f"; session(s) {', '.join(sorted(holding))} kept: the job runs inside them, so a "
            "logout would end it (start it with the boot unit, as `nodeprep run` does)"
        )
    if not ended:
        result["problems"].append(
            f"no login session of {job.user} but the drill's own was open, so nothing was "
            "dropped; log in as that user (as whoever started the job) and drill again"
        )
        result["passed"] = False
    return result


# --- reboot: the drill spans a boot, so it is two calls with the reboot between them --------


def boot_id(path: str = BOOT_ID) -> str:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def reboot_record_path(drill_id: str, root: str = REBOOT_DIR) -> str:
    return os.path.join(root, f"reboot-{drill_id}.json")


def drill_reboot_arm(
    job: Job, drill_id: str, timeout_s: float, boot_unit: str, unit_enabled: bool,
    root: str = REBOOT_DIR,
) -> dict[str, Any]:  # fmt: skip
    """Before the reboot: the job must come back by itself (its boot unit enabled) and be
    training; what it had reached is recorded in ROOT, which survives the boot. The caller
    reboots the node next (Ansible's reboot, which waits for a new boot id) and then calls
    drill_reboot_judge with the same DRILL_ID. Nothing is injected here, so there is nothing
    to undo: the reboot is its own end, and the record is removed by the judge (or replaced by
    the next arm)."""
    if not unit_enabled:
        raise DrillError(
            f"the job in {job.run_dir} has no enabled boot unit ({boot_unit}), so a reboot would "
            "end it for good; start it with `nodeprep run` and job_start_at_boot true."
        )
    watch = LogWatch(job.log)
    _settle(job, watch, timeout_s)
    os.makedirs(root, mode=0o755, exist_ok=True)
    for name in os.listdir(root):  # a record of a drill whose controller went away
        if name.startswith("reboot-") and name.endswith(".json"):
            os.unlink(os.path.join(root, name))
    offset = os.path.getsize(job.log) if os.path.exists(job.log) else 0
    reached = last_step(job.log)  # a step logged after OFFSET is read again by the judge
    record = {
        "drill_id": drill_id, "boot_id": boot_id(), "asked_at": time.time(),
        "log_offset": offset, "step_at_fault": reached[0] if reached else None,
        "committed_at_fault": job.committed(),
        "emergencies": job.emergencies(), "snapshot": snapshot(),
    }  # fmt: skip
    path = reboot_record_path(drill_id, root)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(path + ".tmp", path)
    return record


def unit_started(unit: str) -> float | None:
    """When UNIT last began to start, as wall time (None: it has not started this boot)."""
    rc, out, _ = run(["systemctl", "show", unit, "-p", "InactiveExitTimestampMonotonic",
                      "--value"])  # fmt: skip
    try:
        micros = int(out.strip()) if rc == 0 else 0
    except ValueError:
        micros = 0
    if micros <= 0:
        return None
    return time.time() - time.monotonic() + micros / 1e6


def _before_the_boot(watch: LogWatch, record: dict[str, Any]) -> tuple[Timeline, int | None]:
    """The log since the arm: the last step reached before the shutdown, and a Timeline fed
    with everything from the job's start in a later boot (launch.sh's line that names a boot
    id other than the arm's; a torchrun restart before the shutdown is not that start)."""
    timeline = Timeline(float(record["asked_at"]))
    reached = record.get("step_at_fault")
    lines = watch.poll()
    for index, (_seen, line) in enumerate(lines):
        boot = _BOOT.search(line)
        if boot and boot.group(1) != record.get("boot_id"):
            timeline.feed(lines[index + 1 :])
            return timeline, reached
        step = _STEP.match(line)
        if step:
            reached = int(step.group(1))
    return timeline, reached


def _shutdown_save(job: Job, record: dict[str, Any], result: dict[str, Any]) -> str:
    """The emergency checkpoint the shutdown's SIGTERM made, if any: its time to durable."""
    asked = float(record["asked_at"])
    saves = [
        r
        for r in emergency_records(job.run_dir, int(record.get("emergencies") or 0))
        if r.get("signal") == "SIGTERM"
        and (_num(r, "signal_time") or 0.0) >= asked
        and _num(r, "committed_time") is not None
    ]
    if not saves:
        return "no emergency checkpoint at the shutdown"
    save = saves[-1]
    result["checkpoint_s"] = round(float(save["committed_time"]) - float(save["signal_time"]), 3)
    return (f"the shutdown's {save.get('signal') or 'signal'} saved step {save.get('step')} in "
            f"{result['checkpoint_s']} s")  # fmt: skip


def _came_back(
    result: dict[str, Any], timeline: Timeline, watch: LogWatch, reached: int | None,
    timeout_s: float, since: str, timed_from: float,
) -> str:  # fmt: skip
    """Wait for the job's first step after it started again (after a reclaim, a boot); where it
    resumed, what that lost, and when it stepped, counted from TIMED_FROM (wall clock). SINCE
    ends the sentence of a job that never started again ("" or " of the boot")."""
    end = time.monotonic() + timeout_s  # the wall clock may be stepped just after a boot
    while time.monotonic() < end and not timeline.after_resume:
        timeline.feed(watch.poll())
        time.sleep(0.05)
    result["resumed_from"] = timeline.resumed_from
    if timeline.resumed_from is None:
        result["problems"].append(f"the job did not start again within {timeout_s:g} s{since}")
        return "not started again"
    if timeline.after_resume:  # a job that started from scratch still stepped
        result["next_step_s"] = round(timeline.after_resume[0][1] - timed_from, 2)
    if not timeline.resumed:
        result["problems"].append("the job started again from scratch, not from a checkpoint")
        return "started again from scratch"
    if reached is not None:
        result["steps_lost"] = max(0, int(reached) - timeline.resumed_from)
    return f"resumed from step {timeline.resumed_from}"


def drill_reboot_judge(
    job: Job, drill_id: str, timeout_s: float, boot_unit: str, unit_enabled: bool,
    root: str = REBOOT_DIR,
) -> dict[str, Any]:  # fmt: skip
    """After the reboot: the node booted anew, the boot unit started the job, and it resumed
    from a checkpoint; at most the checkpoint interval lost. Times are from the arm (the task
    just before Ansible's reboot, so they include that task's start), on the node's wall
    clock, which the boot carries over."""
    path = reboot_record_path(drill_id, root)
    record = _load(path)
    if not record:
        raise DrillError(
            f"no reboot drill {drill_id} was armed on this node ({path} is missing or "
            "unreadable); the reboot drill arms, reboots and judges in one `nodeprep drill`."
        )
    asked = float(record["asked_at"])
    watch = LogWatch(job.log)
    offset = int(record.get("log_offset") or 0)
    watch.offset = offset if watch.offset >= offset else 0  # a log made anew: all of it
    timeline, reached = _before_the_boot(watch, record)
    result = _result("reboot", job, step_at_fault=reached,
                     committed_at_fault=record.get("committed_at_fault"))  # fmt: skip
    if boot_id() == record.get("boot_id"):
        result["problems"].append("the node did not reboot: its boot id is the one before")
    said = [f"kernel up {time.time() - time.monotonic() - asked:.1f} s after the arm",
            _shutdown_save(job, record, result)]  # fmt: skip
    said.append(
        _came_back(result, timeline, watch, reached, timeout_s, " of the boot", timeline.fault_time)
    )
    started = unit_started(boot_unit)
    if started is not None and started >= asked:
        result["detected_by"] = "boot unit"
        result["detect_s"] = round(started - asked, 2)
    left = differences(record.get("snapshot") or {}, snapshot())
    if not unit_enabled:
        left.append(f"the boot unit {boot_unit} is no longer enabled")
    if not job.alive():
        left.append("the job is not running")
    result["restored"], result["left"] = not left, left
    result["detail"] = "; ".join(said)
    with contextlib.suppress(OSError):
        os.unlink(path)
    return _judge(result)
