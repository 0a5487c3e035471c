"""GPU health through NVML: temperature, memory, utilisation, ECC and XID events.

The NVML module is passed in (the boundary): the daemon passes ``pynvml`` when it can be
imported, tests may pass another object with the same few calls. No library, no driver
or no GPU gives a *skipped* outcome naming why, never a failure and never a crash.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from nodeprep.heartbeat import nvml
from nodeprep.heartbeat.config import ProbeConfig
from nodeprep.heartbeat.probes import Outcome

log = logging.getLogger(__name__)
# XIDs after which the GPU cannot be trusted: an immediate trigger, not a failure count.
FATAL_XIDS = nvml.FATAL_XIDS


def load_nvml() -> tuple[Any | None, str | None]:
    """The real ``pynvml`` module, or None with the reason it is missing."""
    return nvml.load()


class GpuCheck:
    """One NVML session, initialised on first use and kept; readings kept for metrics."""

    def __init__(self, cfg: ProbeConfig, nvml: Any | None, missing: str | None = None) -> None:
        self.cfg = cfg
        self.nvml: Any = nvml
        self.skipped_reason = missing if nvml is None else None
        self.readings: dict[str, dict[str, float]] = {}
        self.xid_counts: dict[str, int] = {}
        self.uuids: dict[str, str] = {}  # index -> NVML UUID, read once at start
        self._handles: list[Any] = []
        self._events: Any = None

    def _start(self) -> str | None:
        """Initialise NVML; return a skip reason when there is nothing to check."""
        nv = self.nvml
        problem = nvml.init(nv)
        if problem is not None:
            return problem
        self._handles = nvml.handles(nv)
        if not self._handles:
            return "no NVIDIA GPU"
        self.uuids = {str(i): nvml.uuid(nv, handle) for i, handle in enumerate(self._handles)}
        try:
            self._events = nv.nvmlEventSetCreate()
            for handle in self._handles:
                nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, self._events)
        except nv.NVMLError as err:
            log.warning("XID events unavailable: %s", err)
            self._events = None
        return None

    def attempt(self) -> Outcome:
        """Read every GPU and judge it against the thresholds."""
        start = time.monotonic()
        if self.nvml is not None and not self._handles and self.skipped_reason is None:
            self.skipped_reason = self._start()
        if self.skipped_reason is not None:
            return Outcome(True, f"skipped: {self.skipped_reason}", 0.0, skipped=True)
        problems: list[str] = []
        fatal = False
        for index, handle in enumerate(self._handles):
            problems += self._read(str(index), handle)
        for gpu, xid in self._drain_xids():
            self.xid_counts[gpu] = self.xid_counts.get(gpu, 0) + 1
            self.readings.setdefault(gpu, {})["xid_events_total"] = self.xid_counts[gpu]
            problems.append(f"gpu{gpu} XID {xid}")
            fatal = fatal or xid in FATAL_XIDS
        latency = time.monotonic() - start
        if problems:
            return Outcome(False, "; ".join(problems), latency, notice=fatal)
        return Outcome(True, f"{len(self._handles)} GPU(s) within limits", latency)

    def _read(self, gpu: str, handle: Any) -> list[str]:
        cfg = self.cfg
        found = nvml.read(self.nvml, handle)
        temp, mem_ratio = found["temperature_c"], found["memory_used_ratio"]
        util, ecc = found["utilization_ratio"], found["ecc_uncorrected"]
        reading = {
            "temperature_celsius": temp,
            "memory_used_ratio": mem_ratio,
            "utilization_ratio": util,
        }
        problems = []
        if temp > cfg.max_temp_c:
            problems.append(f"gpu{gpu} temperature {temp:g} C > {cfg.max_temp_c:g} C")
        if mem_ratio > cfg.max_memory_ratio:
            problems.append(f"gpu{gpu} memory {mem_ratio:.3f} used > {cfg.max_memory_ratio:g}")
        if cfg.min_utilization_ratio is not None and util < cfg.min_utilization_ratio:
            problems.append(f"gpu{gpu} utilisation {util:.2f} < {cfg.min_utilization_ratio:g}")
        if ecc is not None:  # None: ECC off or not supported on this board, nothing to judge
            reading["ecc_uncorrected_errors"] = float(ecc)
            if ecc > cfg.max_ecc_uncorrected:
                problems.append(
                    f"gpu{gpu} {ecc} uncorrected ECC errors > {cfg.max_ecc_uncorrected}"
                )
        reading["xid_events_total"] = float(self.xid_counts.get(gpu, 0))
        self.readings[gpu] = reading
        return problems

    def _drain_xids(self) -> list[tuple[str, int]]:
        """Critical XID events queued since the last attempt (non-blocking)."""
        if self._events is None:
            return []
        nv, found = self.nvml, []
        for _ in range(64):
            try:
                data = nv.nvmlEventSetWait(self._events, 0)
            except nv.NVMLError:
                break  # NVML_ERROR_TIMEOUT: nothing queued
            found.append((str(nv.nvmlDeviceGetIndex(data.device)), int(data.eventData)))
        return found
