"""The progress probe: is every registered trainer still taking steps?

A trainer that stops making progress (a hung collective, a deadlocked loader, a stuck
filesystem) looks healthy to every other probe until its collective timeout fires: 10
minutes by PyTorch's default for NCCL. This probe reads the progress record that each
confirmed trainer publishes at every step (:mod:`nodeprep.progress`) and calls a trainer
hung when no step came within its allowance: ``factor`` x its own median step time,
clamped to ``[floor_s, ceiling_s]``, and at least ``startup_s`` while it starts up or
``checkpoint_s`` while a blocking save runs. The median comes from the trainer, so a run
that slows down steadily moves its own allowance with it.

A trainer that the watchdog paused itself (``pause_trainers``) is not judged: it stopped
because it was asked to.

The probe also watches the loss it reads: one that is NaN or Inf, or above
``loss_spike_factor`` x the median of the losses it read recently, is an anomaly. That is a
warning (logged when it starts, and a metric), not a trip: whether a spike is fatal is the
run's call, and the checkpointer already refuses non-finite state.
"""

from __future__ import annotations

import collections
import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nodeprep import contract
from nodeprep.heartbeat.config import ProbeConfig
from nodeprep.heartbeat.probes import Outcome
from nodeprep.progress import (
    Phase,
    Progress,
    ProgressInFlight,
    ProgressUnreadable,
    progress_path,
    read_progress,
)

log = logging.getLogger(__name__)
_LOSS_WINDOW = 32  # losses read (one per probe interval) that make the median


@dataclass(frozen=True)
class Stalled:
    """A trainer found hung: who, what it last published, and the figures of the verdict."""

    entry: contract.Registration
    progress: Progress
    idle_s: float
    allowed_s: float

    def describe(self) -> str:
        return (
            f"trainer pid {self.entry.pid} (rank {self.progress.rank}, {self.entry.run_dir}): "
            f"no step for {self.idle_s:.1f} s after step {self.progress.step} "
            f"(allowed {self.allowed_s:.1f} s, {self.progress.phase.name.lower()})"
        )


@dataclass(frozen=True)
class ProgressOutcome(Outcome):
    """An outcome that also names the hung trainers, for the hang response."""

    stalled: tuple[Stalled, ...] = field(default=())


@dataclass(frozen=True)
class TrainerReading:
    """What the metrics say about one trainer."""

    run_dir: str
    rank: int
    pid: int
    step: int
    loss: float
    steps_per_second: float | None
    seconds_since_step: float
    loss_anomaly: str | None = None  # "nonfinite" or "spike"


def allowance(cfg: ProbeConfig, progress: Progress) -> float:
    """Seconds a trainer may go without a step in its current phase."""
    median = progress.median_step_s
    base = cfg.floor_s if median <= 0 else cfg.factor * median
    allowed = min(max(base, cfg.floor_s), cfg.ceiling_s)
    if progress.phase is Phase.STARTUP:
        return max(allowed, cfg.startup_s)
    if progress.phase is Phase.CHECKPOINT:
        return max(allowed, cfg.checkpoint_s)
    return allowed


class ProgressCheck:
    """One probe over every registered trainer; its readings are kept for the metrics."""

    def __init__(
        self,
        cfg: ProbeConfig,
        registry: Path,
        paused: Callable[[], set[int]] = set,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg, self.registry, self.paused, self.clock = cfg, registry, paused, clock
        self.readings: dict[tuple[str, int], TrainerReading] = {}
        # The last consistent reading per pid: it stands for a record whose writer was
        # stopped inside a write, so that rank still ages into a hang.
        self._last: dict[int, Progress] = {}
        self._losses: dict[tuple[str, int], collections.deque[float]] = {}
        self._anomalies: dict[tuple[str, int], str | None] = {}

    def attempt(self) -> Outcome:
        start = time.monotonic()
        trainers = contract.scan_registry(self.registry).trainers
        paused = self.paused()
        judged: list[Stalled] = []
        seen: dict[int, Progress] = {}
        readings: dict[tuple[str, int], TrainerReading] = {}
        problems: list[str] = []
        for entry in trainers:
            if entry.pid in paused:
                continue
            try:
                progress = read_progress(progress_path(entry.pid, self.registry))
            except ProgressInFlight as err:
                progress = self._last.get(entry.pid)
                if progress is None:
                    problems.append(f"pid {entry.pid}: {err}")
            except (OSError, ProgressUnreadable) as err:
                problems.append(f"pid {entry.pid}: {err}")
                continue
            if progress is None:  # a trainer that publishes no progress is not judged
                continue
            seen[entry.pid] = progress
            idle = self.clock() - progress.last_step_time
            allowed = allowance(self.cfg, progress)
            key = (entry.run_dir, progress.rank)
            readings[key] = _reading(entry, progress, idle, self._loss_anomaly(key, progress))
            judged.append(Stalled(entry, progress, idle, allowed))
        self.readings, self._last = readings, seen
        latency = time.monotonic() - start
        late = [s for s in judged if s.idle_s > s.allowed_s]
        if late:
            # Every rank of a hung job, on this node: the others wait in its collectives
            # (their stacks say where), and the job restarts as a whole.
            runs = {s.entry.run_dir for s in late}
            stalled = tuple(s for s in judged if s.entry.run_dir in runs)
            evidence = "; ".join(s.describe() for s in late)
            return ProgressOutcome(False, f"hung: {evidence}", latency, stalled=stalled)
        evidence = f"{len(readings)} trainer(s) stepping" if readings else "no trainer publishes"
        if problems:
            evidence += f"; unreadable progress: {'; '.join(problems)}"
        return ProgressOutcome(True, evidence, latency)

    def _loss_anomaly(self, key: tuple[str, int], progress: Progress) -> str | None:
        """Judge the loss read now against the recent ones; log when an anomaly starts."""
        loss, anomaly = progress.loss, None
        if progress.step == 0:  # nothing trained yet: no loss to judge
            return None
        recent = self._losses.setdefault(key, collections.deque(maxlen=_LOSS_WINDOW))
        if not math.isfinite(loss):
            anomaly = "nonfinite"
        elif self.cfg.loss_spike_factor and len(recent) >= 3:
            median = statistics.median(recent)
            if median > 0 and loss > self.cfg.loss_spike_factor * median:
                anomaly = "spike"
        if anomaly != "nonfinite":
            recent.append(loss)
        if anomaly is not None and self._anomalies.get(key) != anomaly:
            log.warning(
                "trainer=%s rank=%d loss_anomaly=%s loss=%s step=%d recent_median=%s",
                key[0], key[1], anomaly, loss, progress.step,
                f"{statistics.median(recent):.6g}" if recent else "none",
            )  # fmt: skip
        self._anomalies[key] = anomaly
        return anomaly


def _reading(
    entry: contract.Registration, progress: Progress, idle: float, anomaly: str | None
) -> TrainerReading:
    rate = 1.0 / progress.median_step_s if progress.median_step_s > 0 else None
    return TrainerReading(
        entry.run_dir, progress.rank, entry.pid, progress.step, progress.loss, rate, idle, anomaly
    )
