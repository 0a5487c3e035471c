"""What the watchdog does on a trip: signal trainers, optionally pause them, tmux, webhook.

Signals and tmux keys go out at once from the loop (milliseconds); waiting for the
emergency checkpoint and calling the webhook run in background threads so a slow
trainer or a dead webhook never delays detection of the next failure.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nodeprep import contract
from nodeprep.heartbeat.config import ActionsConfig

log = logging.getLogger(__name__)
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Trip:
    """Why the watchdog acted: the probe, its evidence and when it was detected (Unix time)."""

    probe: str
    evidence: str
    detected_at: float
    notice: bool = False


@dataclass
class ActionLedger:
    """Counters the metrics export; written by the loop and the checkpoint watchers."""

    total: dict[str, int] = field(default_factory=dict)
    last_time: dict[str, float] = field(default_factory=dict)
    last_checkpoint_latency_s: float | None = None

    def note(self, action: str, when: float) -> None:
        self.total[action] = self.total.get(action, 0) + 1
        self.last_time[action] = when


class Actions:
    """Carries out trips and recoveries according to the ``actions`` config."""

    def __init__(self, cfg: ActionsConfig, registry: Path, tmux_bin: str = "tmux") -> None:
        self.cfg = cfg
        self.registry = registry
        self.tmux_bin = tmux_bin
        self.ledger = ActionLedger()
        self.paused: set[int] = set()
        self._lock = threading.Lock()
        self._last_trip = float("-inf")
        self._hooks: queue.Queue[dict[str, object]] = queue.Queue(maxsize=16)
        if cfg.webhook_url:
            threading.Thread(target=self._webhook_worker, name="webhook", daemon=True).start()

    def trip(self, trip: Trip) -> None:
        """Act on a failure or notice, unless another trip acted very recently."""
        if trip.detected_at - self._last_trip < self.cfg.min_trip_interval_s:
            log.info(
                "action=suppressed probe=%s evidence=%r reason=recent trip",
                trip.probe,
                trip.evidence,
            )
            return
        self._last_trip = trip.detected_at
        self._note("trip", trip)
        if self.cfg.signal_trainers:
            self._signal_trainers(trip)
        if self.cfg.tmux_session:
            self._tmux(trip)
        self._webhook("trip", trip)

    def recover(self, trip: Trip) -> None:
        """The node is healthy again: resume paused trainers and tell the webhook."""
        self._note("recover", trip)
        with self._lock:
            paused, self.paused = self.paused, set()
        for pid in sorted(paused):
            _send(pid, signal.SIGCONT)
            log.info("action=resume_trainer pid=%d probe=%s", pid, trip.probe)
        self._webhook("recover", trip)

    def _note(self, action: str, trip: Trip) -> None:
        with self._lock:
            self.ledger.note(action, trip.detected_at)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(trip.detected_at))
        log.warning(
            "action=%s probe=%s evidence=%r detected_at=%s (%.3f)",
            action,
            trip.probe,
            trip.evidence,
            stamp,
            trip.detected_at,
        )

    def _signal_trainers(self, trip: Trip) -> None:
        trainers = contract.registered_trainers(self.registry)
        if not trainers:
            log.info("action=signal_trainers probe=%s result=no registered trainers", trip.probe)
        for entry in trainers:
            run_dir = Path(entry.run_dir)
            before = len(contract.read_emergency_records(run_dir))
            if not _send(entry.pid, contract.EMERGENCY_SIGNAL):
                continue
            with self._lock:
                self.ledger.note("signal_trainer", time.time())
            log.warning(
                "action=signal_trainer pid=%d signal=%s run_dir=%s probe=%s evidence=%r",
                entry.pid,
                contract.EMERGENCY_SIGNAL.name,
                run_dir,
                trip.probe,
                trip.evidence,
            )
            threading.Thread(
                target=self._await_checkpoint,
                args=(entry.pid, run_dir, before, trip),
                name="checkpoint-wait",
                daemon=True,
            ).start()

    def _await_checkpoint(self, pid: int, run_dir: Path, before: int, trip: Trip) -> None:
        """Report detection -> committed checkpoint, then pause the trainer if configured."""
        deadline = time.monotonic() + self.cfg.pause_wait_s
        while time.monotonic() < deadline:
            records = contract.read_emergency_records(run_dir)
            if len(records) > before:
                latency = records[-1].committed_time - trip.detected_at
                with self._lock:
                    self.ledger.last_checkpoint_latency_s = latency
                log.warning(
                    "action=checkpoint_committed pid=%d path=%s step=%d "
                    "detect_to_checkpoint_s=%.3f",
                    pid,
                    records[-1].path,
                    records[-1].step,
                    latency,
                )
                break
            time.sleep(0.05)
        else:
            log.error(
                "action=checkpoint_missing pid=%d run_dir=%s waited_s=%g",
                pid,
                run_dir,
                self.cfg.pause_wait_s,
            )
        if self.cfg.pause_trainers and _send(pid, signal.SIGSTOP):
            with self._lock:
                self.paused.add(pid)
                self.ledger.note("pause_trainer", time.time())
            log.warning("action=pause_trainer pid=%d probe=%s", pid, trip.probe)

    def _tmux(self, trip: Trip) -> None:
        """The fallback for jobs that are not nodeprep trainers: keys into a tmux session."""
        sock = self.cfg.tmux_socket
        base = [self.tmux_bin] + (["-S" if "/" in sock else "-L", sock] if sock else [])
        target = ["-t", str(self.cfg.tmux_session)]
        # Copy mode swallows keys; leaving it first is harmless when not in a mode.
        _run([*base, "send-keys", *target, "-X", "cancel"], quiet=True)
        ok = _run([*base, "send-keys", *target, *self.cfg.tmux_keys], quiet=False)
        with self._lock:
            self.ledger.note("tmux_send_keys" if ok else "tmux_failed", time.time())
        log.warning(
            "action=tmux_send_keys session=%s keys=%s result=%s probe=%s evidence=%r",
            self.cfg.tmux_session,
            " ".join(self.cfg.tmux_keys),
            "ok" if ok else "failed",
            trip.probe,
            trip.evidence,
        )

    def _webhook(self, event: str, trip: Trip) -> None:
        if not self.cfg.webhook_url:
            return
        try:
            self._hooks.put_nowait({"event": event, "host": os.uname().nodename, **asdict(trip)})
        except queue.Full:
            log.error("action=webhook_dropped event=%s reason=queue full", event)

    def _webhook_worker(self) -> None:
        """One POST per event, one attempt each: a dead receiver costs a timeout, not a storm."""
        while True:
            payload = self._hooks.get()
            req = urllib.request.Request(
                str(self.cfg.webhook_url),
                data=json.dumps(payload).encode(),
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            try:
                with _NO_PROXY.open(req, timeout=self.cfg.webhook_timeout_s) as resp:
                    resp.read(1024)
                log.info("action=webhook event=%s status=%d", payload["event"], resp.status)
            except OSError as err:
                log.error("action=webhook event=%s failed=%s", payload["event"], err)


def _send(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
    except OSError as err:
        log.error("action=signal pid=%d signal=%s failed=%s", pid, sig.name, err)
        return False
    return True


def _run(argv: list[str], quiet: bool) -> bool:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        log.error("tmux %s failed: %s", argv[1:], err)
        return False
    if done.returncode != 0 and not quiet:
        log.error("tmux %s exited %d: %s", argv[1:], done.returncode, done.stderr.strip())
    return done.returncode == 0
