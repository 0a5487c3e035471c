"""Prometheus textfile output (node_exporter's textfile collector), through prometheus_client.

Each write builds a registry from one snapshot and hands it to ``write_to_textfile``, which
writes a temporary file in the same directory and renames it over the old one: node_exporter,
reading at any instant, sees the previous complete file or the new one, never a partial one.
prometheus_client also formats the values (full precision: a Unix time stays exact to the
sub-second) and types counters as counters, named with their ``_total`` suffix.

``registrations_ignored_total{reason}`` is a counter of its own rather than an action
kind: ignoring a record is not something the watchdog did to the node, and the reason
is a dimension of its own. Every reason is exported from the start (0 until it
happens), so ``increase()`` sees the first one. GPUs are labelled by index and UUID, as
dcgm-exporter labels them, so a series follows the board when indices are renumbered.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from nodeprep.contract import IgnoreReason
from nodeprep.heartbeat.free_space import LEVELS, DiskReading
from nodeprep.heartbeat.progress_probe import TrainerReading
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
    gpu_uuid: dict[str, str] = field(default_factory=dict)  # index -> NVML UUID
    trainers: dict[tuple[str, int], TrainerReading] = field(default_factory=dict)
    trainer_hangs: dict[tuple[str, int], int] = field(default_factory=dict)
    trainer_last_dump: dict[tuple[str, int], float] = field(default_factory=dict)
    disks: dict[str, DiskReading] = field(default_factory=dict)  # probe name -> reading
    growth: dict[str, Any] = field(default_factory=dict)  # path -> grow.VolumeGrowth


def _gauge(name: str, help_text: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", help_text, labels=labels)


def _counter(name: str, help_text: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(f"{PREFIX}_{name}", help_text, labels=labels)


def families(snap: Snapshot) -> Iterator[Metric]:
    """The metric families of one snapshot, in the order the textfile lists them."""
    up = _gauge("probe_up", "1 if the probe's last attempt succeeded, 0 if it failed.",
                ["probe", "type"])  # fmt: skip
    latency = _gauge("probe_latency_seconds", "Duration of the probe's last attempt.", ["probe"])
    failures = _gauge("probe_consecutive_failures", "Failures in a row for the probe.", ["probe"])
    state = _gauge("probe_state",
                   "1 for the probe's current state (healthy/suspect/failed/skipped).",
                   ["probe", "state"])  # fmt: skip
    for p in snap.probes:
        if p.up is not None:
            up.add_metric([p.name, p.type], 1.0 if p.up else 0.0)
        if p.latency_s is not None:
            latency.add_metric([p.name], p.latency_s)
        failures.add_metric([p.name], p.consecutive_failures)
        for s in State:
            state.add_metric([p.name, s.value], float(p.state is s))
    yield from (up, latency, failures, state)
    node = _gauge("node_state", "1 for the node's current state.", ["state"])
    for s in State:
        node.add_metric([s.value], float(snap.node is s))
    yield node
    actions = _counter("actions", "Actions taken since the daemon started.", ["action"])
    for action, count in sorted(snap.actions_total.items()):
        actions.add_metric([action], count)
    yield actions
    last = _gauge("last_action_timestamp_seconds", "Unix time of the last action of each kind.",
                  ["action"])  # fmt: skip
    for action, when in sorted(snap.last_action_time.items()):
        last.add_metric([action], when)
    yield last
    if snap.last_checkpoint_latency_s is not None:
        latency = _gauge("detect_to_checkpoint_seconds",
                         "Last detection to committed emergency checkpoint.", [])  # fmt: skip
        latency.add_metric([], snap.last_checkpoint_latency_s)
        yield latency
    ignored = _counter("registrations_ignored",
                       "Trainer registrations ignored (never signalled) since the daemon "
                       "started, by reason.", ["reason"])  # fmt: skip
    for reason in IgnoreReason:
        ignored.add_metric([reason.value], snap.registrations_ignored.get(reason.value, 0))
    yield ignored
    yield from _trainer_families(snap)
    yield from _disk_families(snap)
    yield from _growth_families(snap)
    yield from _gpu_families(snap)


def _disk_families(snap: Snapshot) -> Iterator[Metric]:
    """Per free_space probe: size, free, fill rate, time until full, level."""
    if not snap.disks:
        return
    labels = ["probe", "path"]
    size = _gauge("disk_size_bytes", "Size of the probed filesystem.", labels)
    free = _gauge("disk_free_bytes", "Space available to unprivileged writers.", labels)
    rate = _gauge("disk_fill_rate_bytes_per_second",
                  "Growth of the used space over the probe's window.", labels)  # fmt: skip
    until = _gauge("disk_seconds_until_full", "Projected from the fill rate (when filling).",
                   labels)  # fmt: skip
    level = _gauge("disk_level", "1 for the filesystem's level (ok/warning/critical).",
                   [*labels, "level"])  # fmt: skip
    for name, reading in sorted(snap.disks.items()):
        key = [name, reading.path]
        size.add_metric(key, reading.size_bytes)
        free.add_metric(key, reading.free_bytes)
        if reading.fill_rate_bytes_per_s is not None:
            rate.add_metric(key, reading.fill_rate_bytes_per_s)
        if reading.seconds_until_full is not None:
            until.add_metric(key, reading.seconds_until_full)
        for kind in LEVELS:
            level.add_metric([*key, kind], float(reading.level == kind))
    yield from (size, free, rate, until, level)


def _growth_families(snap: Snapshot) -> Iterator[Metric]:
    """Per growable volume: growths and refusals so far, its size, when it may grow next."""
    if not snap.growth:
        return
    labels = ["path", "volume_id"]
    grown = _counter("volume_growths", "Volume growths the growth action completed.", labels)
    refused = _counter("volume_growth_refusals",
                       "Growth requests refused or failed (cooldown, maximum, credentials).",
                       labels)  # fmt: skip
    size = _gauge("volume_size_gib", "The volume's size after its last growth answer.", labels)
    held = _gauge("volume_growth_held", "1 while no growth will be requested (label: why).",
                  [*labels, "reason"])  # fmt: skip
    after = _gauge("volume_growth_next_possible_timestamp_seconds",
                   "Unix time from which the provider accepts the next modification.",
                   labels)  # fmt: skip
    for path, volume in sorted(snap.growth.items()):
        key = [path, volume.cfg.name]
        grown.add_metric(key, volume.grown_total)
        refused.add_metric(key, volume.refused_total)
        if volume.size_gb is not None:
            size.add_metric(key, volume.size_gb)
        if volume.held_reason and volume.held_until > time.time():
            held.add_metric([*key, volume.held_reason[:200]], 1.0)
        if volume.next_possible_at is not None:
            after.add_metric(key, volume.next_possible_at)
    yield from (grown, refused, size, held, after)


def _trainer_families(snap: Snapshot) -> Iterator[Metric]:
    """Per trainer (run directory and rank, stable across restarts, unlike the pid); none
    until a progress probe has seen a trainer."""
    if not snap.trainers and not snap.trainer_hangs:
        return
    labels = ["run_dir", "rank"]
    gauges = {
        "step": _gauge("trainer_step", "Last step the trainer completed.", labels),
        "rate": _gauge("trainer_steps_per_second", "1 / the trainer's median step time.", labels),
        "idle": _gauge("trainer_seconds_since_step", "Seconds since its last step.", labels),
        "loss": _gauge("trainer_loss", "Loss of its last step.", labels),
        "anomaly": _gauge(
            "trainer_loss_anomaly",
            "1 while the loss read is NaN/Inf or a spike (label kind).",
            [*labels, "kind"],
        ),
    }
    for (run_dir, rank), reading in sorted(snap.trainers.items()):
        key = [run_dir, str(rank)]
        gauges["step"].add_metric(key, reading.step)
        if reading.steps_per_second is not None:
            gauges["rate"].add_metric(key, reading.steps_per_second)
        gauges["idle"].add_metric(key, reading.seconds_since_step)
        gauges["loss"].add_metric(key, reading.loss)
        for kind in ("nonfinite", "spike"):
            gauges["anomaly"].add_metric([*key, kind], float(reading.loss_anomaly == kind))
    yield from gauges.values()
    hangs = _counter("trainer_hangs", "Hangs declared for the trainer since the daemon started.",
                     labels)  # fmt: skip
    known = sorted(set(snap.trainers) | set(snap.trainer_hangs))
    for run_dir, rank in known:
        hangs.add_metric([run_dir, str(rank)], snap.trainer_hangs.get((run_dir, rank), 0))
    yield hangs
    dumped = _gauge("trainer_last_stack_dump_timestamp_seconds",
                    "Unix time of the trainer's last stack dump.", labels)  # fmt: skip
    for (run_dir, rank), when in sorted(snap.trainer_last_dump.items()):
        dumped.add_metric([run_dir, str(rank)], when)
    yield dumped


def _gpu_families(snap: Snapshot) -> Iterator[Metric]:
    if snap.gpu_skipped_reason is not None:
        skipped = _gauge("gpu_check_skipped", "1 when GPU checks are skipped; the label says why.",
                         ["reason"])  # fmt: skip
        skipped.add_metric([snap.gpu_skipped_reason], 1.0)
        yield skipped
    for metric in sorted({metric for reading in snap.gpu.values() for metric in reading}):
        # A reading named *_total counts since the daemon started: a counter (prometheus_client
        # keeps the suffix for the sample and drops it from the family's name).
        kind = _counter if metric.endswith("_total") else _gauge
        family = kind(f"gpu_{metric}", f"NVML reading {metric} per GPU.", ["gpu", "uuid"])
        for index, reading in sorted(snap.gpu.items()):
            if metric in reading:
                family.add_metric([index, snap.gpu_uuid.get(index, "")], reading[metric])
        yield family


class _Collector(Collector):
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        return families(self.snap)


def registry(snap: Snapshot) -> CollectorRegistry:
    """A registry that holds exactly this snapshot's metrics."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(snap))
    return reg


def render(snap: Snapshot) -> str:
    """The textfile content for one snapshot."""
    return generate_latest(registry(snap)).decode("utf-8")


def write(path: Path, snap: Snapshot) -> None:
    """Replace the textfile at ``path`` with this snapshot, atomically (temporary file, rename)."""
    write_to_textfile(str(path), registry(snap))
