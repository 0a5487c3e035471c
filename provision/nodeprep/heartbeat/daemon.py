"""The main loop: probe outcomes -> hysteresis -> actions, plus keep-alives and metrics.

The loop thread only waits, counts and dispatches; every attempt runs in its own worker
(see scheduler.py), so the systemd watchdog keep-alive stops only if the loop itself
hangs, which is exactly when systemd should restart the daemon.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from nodeprep.heartbeat import metrics, probes
from nodeprep.heartbeat.actions import Actions, Trip
from nodeprep.heartbeat.config import NETWORK_PROBES, Config, ProbeConfig
from nodeprep.heartbeat.free_space import FreeSpaceCheck
from nodeprep.heartbeat.gpu import GpuCheck, load_nvml
from nodeprep.heartbeat.grow import GrowAction
from nodeprep.heartbeat.progress_probe import ProgressCheck, ProgressOutcome
from nodeprep.heartbeat.scheduler import ProbeRunner, Scheduler
from nodeprep.heartbeat.sdnotify import Notifier
from nodeprep.heartbeat.state import ProbeState, State, Transition, node_state

log = logging.getLogger(__name__)
_LOAD = object()


class Daemon:
    """Owns the probes, their states, the actions and the outputs."""

    def __init__(
        self,
        config: Config,
        notifier: Notifier | None = None,
        nvml: Any = _LOAD,
        tmux_bin: str = "tmux",
    ) -> None:
        self.config = config
        self.notifier = notifier or Notifier()
        self.actions = Actions(config.actions, config.registry_dir, tmux_bin=tmux_bin)
        self.gpu_checks: list[GpuCheck] = []
        self.progress_checks: list[ProgressCheck] = []
        self.disk_checks: list[FreeSpaceCheck] = []
        self.grow = GrowAction(config.grow, self.actions.trip) if config.grow.volumes else None
        self._nvml_given = nvml
        start = time.monotonic()
        self.runners = [
            ProbeRunner(p, self._attempt(p), start, hedge=p.type in NETWORK_PROBES)
            for p in config.probes
        ]
        self.states = {
            p.name: ProbeState(p.fail_threshold, p.recover_threshold) for p in config.probes
        }
        self.scheduler = Scheduler(self.runners)
        self.node = State.HEALTHY

    def _attempt(self, cfg: ProbeConfig) -> probes.Attempt:
        if cfg.type == "gpu":
            given = self._nvml_given
            module, missing = load_nvml() if given is _LOAD else (given, "no NVML module given")
            check = GpuCheck(cfg, module, missing)
            self.gpu_checks.append(check)
            return check.attempt
        if cfg.type == "free_space":
            disk = FreeSpaceCheck(cfg)
            self.disk_checks.append(disk)
            return disk.attempt
        if cfg.type == "progress":
            watch = ProgressCheck(cfg, self.config.registry_dir, self.actions.paused_pids)
            self.progress_checks.append(watch)
            return watch.attempt
        factory = {
            "http": probes.http_attempt,
            "imds": probes.imds_attempt,
            "spot_notice": probes.spot_attempt,
            "tcp": probes.tcp_attempt,
            "icmp": probes.icmp_attempt,
            "writable": probes.writable_attempt,
        }[cfg.type]
        return factory(cfg)

    def run(self, stop: threading.Event) -> None:
        """Loop until ``stop`` is set."""
        names = ", ".join(f"{p.name}({p.type})" for p in self.config.probes)
        log.info("heartbeat started: probes %s", names)
        self.notifier.ready(f"watching {len(self.runners)} probe(s)")
        ping_every = (self.notifier.watchdog_s or 0) / 3 or None
        next_ping = next_metrics = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            waits = [1.0, next_metrics - now] + ([next_ping - now] if ping_every else [])
            for runner, outcome in self.scheduler.poll(max(0.0, min(waits))):
                self._observe(runner.cfg, outcome)
                if self.states[runner.cfg.name].state is State.SUSPECT:
                    runner.hurry(time.monotonic())
            now = time.monotonic()
            if ping_every and now >= next_ping:
                self.notifier.ping()
                next_ping = now + ping_every
            if now >= next_metrics:
                self.write_metrics()
                next_metrics = now + self.config.metrics_interval_s
        self.notifier.stopping()
        self.write_metrics()
        log.info("heartbeat stopped")

    def _observe(self, cfg: ProbeConfig, outcome: probes.Outcome) -> None:
        state = self.states[cfg.name]
        before = state.state
        change = state.observe(outcome)
        if state.state is not before:
            log.info(
                "probe=%s state=%s->%s evidence=%r latency_s=%.3f",
                cfg.name,
                before.value,
                state.state.value,
                outcome.evidence,
                outcome.latency_s,
            )
        trip = Trip(cfg.name, outcome.evidence, time.time(), outcome.notice)
        if change is Transition.FAILED and isinstance(outcome, ProgressOutcome):
            self.actions.hang(trip, list(outcome.stalled))
        elif change is Transition.FAILED:
            self.actions.trip(trip)
        if self.grow is not None and cfg.type == "free_space":
            disk = next((d for d in self.disk_checks if d.cfg is cfg), None)
            if disk is not None and disk.reading is not None:
                self.grow.observe(cfg.name, disk.reading)
        node_before = self.node
        self.node = node_state([s.state for s in self.states.values()])
        if node_before is not self.node:
            self.notifier.status(f"node {self.node.value}: {cfg.name} {outcome.evidence}")
            if node_before is State.FAILED:
                self.actions.recover(trip)

    def snapshot(self) -> metrics.Snapshot:
        """The current readings, for the textfile."""
        readings = []
        for runner in self.runners:
            st = self.states[runner.cfg.name]
            last = st.last
            readings.append(
                metrics.ProbeReading(
                    runner.cfg.name,
                    runner.cfg.type,
                    st.state,
                    None if last is None or last.skipped else last.ok,
                    None if last is None or last.skipped else last.latency_s,
                    st.failures,
                )
            )
        ledger = self.actions.ledger
        snap = metrics.Snapshot(
            readings,
            self.node,
            dict(ledger.total),
            dict(ledger.last_time),
            ledger.last_checkpoint_latency_s,
            registrations_ignored=dict(ledger.ignored),
            trainer_hangs=dict(ledger.trainer_hangs),
            trainer_last_dump=dict(ledger.trainer_last_dump),
        )
        for watch in self.progress_checks:
            snap.trainers.update(watch.readings)
        for disk in self.disk_checks:
            if disk.reading is not None:
                snap.disks[disk.cfg.name] = disk.reading
        if self.grow is not None:
            snap.growth = {v.cfg.path: v for v in self.grow.volumes}
        for check in self.gpu_checks:
            snap.gpu.update(check.readings)
            snap.gpu_uuid.update(check.uuids)
            snap.gpu_skipped_reason = snap.gpu_skipped_reason or check.skipped_reason
        return snap

    def write_metrics(self) -> None:
        path = self.config.metrics_path
        if path is None:
            return
        try:
            metrics.write(path, self.snapshot())
        except OSError as err:
            log.error("cannot write metrics to %s: %s", path, err)
