"""Prometheus textfile output (node_exporter's textfile collector), written atomically.

node_exporter may read the file at any instant, so it is written to a temporary file
in the same directory (same filesystem) and renamed over the old one: a reader sees
either the previous complete file or the new complete file, never a partial one.

``registrations_ignored_total{reason}`` is a counter of its own rather than an action
kind: ignoring a record is not something the watchdog did to the node, and the reason
is a dimension of its own. Every reason is exported from the start (0 until it
happens), so ``increase()`` sees the first one.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from nodeprep.contract import IgnoreReason
from nodeprep.heartbeat.state import State

PREFIX = "nodeprep_heartbeat"


@dataclass
class ProbeReading:
    """What the metrics say about one probe."""

    name: str
    type: str
    state: State
    up: bool | None
    latency_s: float | None
    consecutive_failures: int


@dataclass
class Snapshot:
    """Everything exported in one write."""

    probes: list[ProbeReading]
    node: State
    actions_total: dict[str, int] = field(default_factory=dict)
    last_action_time: dict[str, float] = field(default_factory=dict)
    last_checkpoint_latency_s: float | None = None
    gpu: dict[str, dict[str, float]] = field(default_factory=dict)
    gpu_skipped_reason: str | None = None
    registrations_ignored: dict[str, int] = field(default_factory=dict)


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, help_text: str, kind: str = "gauge") -> None:
        self.lines += [f"# HELP {PREFIX}_{name} {help_text}", f"# TYPE {PREFIX}_{name} {kind}"]

    def sample(self, name: str, labels: dict[str, str], value: float) -> None:
        inner = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
        self.lines.append(f"{PREFIX}_{name}{{{inner}}} {value:.6g}")


def render(snap: Snapshot) -> str:
    """The textfile content for one snapshot."""
    w = _Writer()
    w.family("probe_up", "1 if the probe's last attempt succeeded, 0 if it failed.")
    for p in snap.probes:
        if p.up is not None:
            w.sample("probe_up", {"probe": p.name, "type": p.type}, 1.0 if p.up else 0.0)
    w.family("probe_latency_seconds", "Duration of the probe's last attempt.")
    for p in snap.probes:
        if p.latency_s is not None:
            w.sample("probe_latency_seconds", {"probe": p.name}, p.latency_s)
    w.family("probe_consecutive_failures", "Failures in a row for the probe.")
    for p in snap.probes:
        w.sample("probe_consecutive_failures", {"probe": p.name}, p.consecutive_failures)
    w.family("probe_state", "1 for the probe's current state (healthy/suspect/failed/skipped).")
    for p in snap.probes:
        for s in State:
            w.sample("probe_state", {"probe": p.name, "state": s.value}, float(p.state is s))
    w.family("node_state", "1 for the node's current state.")
    for s in State:
        w.sample("node_state", {"state": s.value}, float(snap.node is s))
    w.family("actions_total", "Actions taken since the daemon started.")
    for action, count in sorted(snap.actions_total.items()):
        w.sample("actions_total", {"action": action}, count)
    w.family("last_action_timestamp_seconds", "Unix time of the last action of each kind.")
    for action, when in sorted(snap.last_action_time.items()):
        w.sample("last_action_timestamp_seconds", {"action": action}, when)
    if snap.last_checkpoint_latency_s is not None:
        w.family(
            "detect_to_checkpoint_seconds", "Last detection to committed emergency checkpoint."
        )
        w.sample("detect_to_checkpoint_seconds", {}, snap.last_checkpoint_latency_s)
    _render_ignored(w, snap)
    _render_gpu(w, snap)
    return "\n".join(w.lines) + "\n"


def _render_ignored(w: _Writer, snap: Snapshot) -> None:
    w.family(
        "registrations_ignored_total",
        "Trainer registrations ignored (never signalled) since the daemon started, by reason.",
        "counter",
    )
    for reason in IgnoreReason:
        count = snap.registrations_ignored.get(reason.value, 0)
        w.sample("registrations_ignored_total", {"reason": reason.value}, count)


def _render_gpu(w: _Writer, snap: Snapshot) -> None:
    if snap.gpu_skipped_reason is not None:
        w.family("gpu_check_skipped", "1 when GPU checks are skipped; the label says why.")
        w.sample("gpu_check_skipped", {"reason": snap.gpu_skipped_reason}, 1.0)
    names = sorted({metric for reading in snap.gpu.values() for metric in reading})
    for metric in names:
        w.family(f"gpu_{metric}", f"NVML reading {metric} per GPU.")
        for index, reading in sorted(snap.gpu.items()):
            if metric in reading:
                w.sample(f"gpu_{metric}", {"gpu": index}, reading[metric])


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and a rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
