"""The free-space probe: how full a checkpoint or data filesystem is, how fast it fills, and
when it will be full.

A run that writes checkpoints and logs for days fills its disk between two provisioning
runs; the ``writable`` probe notices only once a write fails, when the last checkpoint may
already be lost. This probe reads the filesystem (``statvfs``, space available to an
unprivileged writer) at every attempt, keeps the readings of the last ``window_s`` seconds,
and from the oldest and newest of them derives the fill rate and the projected time until
full.

Levels: ``critical`` when the free space is below ``critical_percent`` of the filesystem or
below ``critical_bytes``: the attempt fails, so after ``fail_threshold`` readings the probe
trips (an emergency checkpoint while one still fits). ``warning`` below ``warn_percent`` /
``warn_bytes``: the attempt succeeds and the level is logged when it starts and exported.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from nodeprep.heartbeat.config import ProbeConfig
from nodeprep.heartbeat.probes import Outcome

log = logging.getLogger(__name__)
LEVELS = ("ok", "warning", "critical")


@dataclass(frozen=True)
class DiskReading:
    """What the metrics say about one filesystem."""

    path: str
    size_bytes: int
    free_bytes: int
    fill_rate_bytes_per_s: float | None  # None until two readings span some time
    seconds_until_full: float | None  # None when not filling
    level: str


def _size(value: float) -> str:
    return f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / 2**20:.2f} MiB"


class FreeSpaceCheck:
    """One filesystem, its recent readings, and the level they put it at."""

    def __init__(
        self,
        cfg: ProbeConfig,
        clock: Callable[[], float] = time.monotonic,
        statvfs: Callable[[str], os.statvfs_result] = os.statvfs,
    ) -> None:
        self.cfg, self.clock, self.statvfs = cfg, clock, statvfs
        self._samples: collections.deque[tuple[float, int]] = collections.deque()
        self.reading: DiskReading | None = None
        self._level = "ok"

    def attempt(self) -> Outcome:
        start = time.monotonic()
        try:
            stats = self.statvfs(self.cfg.path)
        except OSError as err:
            return Outcome(False, f"statvfs {self.cfg.path}: {err.strerror or err}", 0.0)
        size = stats.f_blocks * stats.f_frsize
        free = stats.f_bavail * stats.f_frsize
        rate = self._rate(size - free)
        until = free / rate if rate is not None and rate > 0 else None
        level = self._judge(size, free)
        self.reading = DiskReading(self.cfg.path, size, free, rate, until, level)
        evidence = f"{self.cfg.path}: {_size(free)} free of {_size(size)}"
        if rate is not None:
            evidence += f", filling at {rate / 2**20:.2f} MiB/s"
        if until is not None:
            evidence += f", full in {until / 60:.1f} min"
        if level != self._level:
            log.warning("disk=%s level=%s->%s %s", self.cfg.path, self._level, level, evidence)
            self._level = level
        return Outcome(level != "critical", f"{level}: {evidence}", time.monotonic() - start)

    def _rate(self, used: int) -> float | None:
        """Bytes per second over the window: oldest reading to this one."""
        now = self.clock()
        self._samples.append((now, used))
        while self._samples and now - self._samples[0][0] > self.cfg.window_s:
            self._samples.popleft()
        oldest_time, oldest_used = self._samples[0]
        if now - oldest_time <= 0:
            return None
        return (used - oldest_used) / (now - oldest_time)

    def _judge(self, size: int, free: int) -> str:
        cfg = self.cfg
        percent = 100.0 * free / size if size else 0.0
        if percent < cfg.critical_percent or free < cfg.critical_bytes:
            return "critical"
        if percent < cfg.warn_percent or free < cfg.warn_bytes:
            return "warning"
        return "ok"
