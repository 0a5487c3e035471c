"""What the watchdog does on a trip: signal trainers, optionally pause them, tmux, webhook.

Signals and tmux keys go out at once from the loop (milliseconds); waiting for the
emergency checkpoint and calling the webhook run in background threads so a slow
trainer or a dead webhook never delays detection of the next failure.

A signal only goes to a registration whose identity ``contract`` confirms, once when
the registry is scanned and again immediately before the signal (a pid can change
owner in between). Where the kernel offers pidfds the process is pinned first and
signalled through the pidfd, so a pid reused after the last check cannot be hit at
all. Ignored records are logged once each and counted per reason in the ledger.
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
from nodeprep.heartbeat.hang_response import HangResponse
from nodeprep.heartbeat.progress_probe import Stalled

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
    ignored: dict[str, int] = field(default_factory=dict)
    # Per trainer (run_dir, rank): the hangs declared and the last stack dump's Unix time.
    trainer_hangs: dict[tuple[str, int], int] = field(default_factory=dict)
    trainer_last_dump: dict[tuple[str, int], float] = field(default_factory=dict)

    def note(self, action: str, when: float) -> None:
        self.total[action] = self.total.get(action, 0) + 1
        self.last_time[action] = when

    def note_trainer(self, action: str, trainer: Stalled, when: float) -> None:
        """An action of the hang response, per trainer (the hang itself: per trainer only,
        the node counted it once already)."""
        key = (trainer.entry.run_dir, trainer.progress.rank)
        if action == "hang":
            self.trainer_hangs[key] = self.trainer_hangs.get(key, 0) + 1
            return
        self.note(action, when)
        if action == "stack_dump":
            self.trainer_last_dump[key] = when

    def note_ignored(self, reason: contract.IgnoreReason) -> None:
        """One registration ignored (not an action taken, so a separate counter)."""
        self.ignored[reason.value] = self.ignored.get(reason.value, 0) + 1


class Actions:
    """Carries out trips and recoveries according to the ``actions`` config."""

    def __init__(self, cfg: ActionsConfig, registry: Path, tmux_bin: str = "tmux") -> None:
        self.cfg = cfg
        self.registry = registry
        self.tmux_bin = tmux_bin
        self.ledger = ActionLedger()
        self.paused: dict[int, contract.Registration] = {}
        self._seen_ignored: set[tuple[str, int, int]] = set()
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

    def hang(self, trip: Trip, stalled: list[Stalled]) -> None:
        """Trainers stopped stepping: dump their stacks, then escalate (in the background).

        Not subject to ``min_trip_interval_s``: a hang is not another view of a network
        trip that has just been acted on, and an emergency checkpoint cannot help a trainer
        that no longer reaches a step boundary.
        """
        self._note("hang", trip)
        response = HangResponse(self.cfg.hang, self._send, self._alive, self._note_trainer)
        threading.Thread(target=response.run, args=(stalled,), name="hang", daemon=True).start()
        self._webhook("hang", trip)

    def paused_pids(self) -> set[int]:
        """Trainers this watchdog paused itself: stopped on purpose, never hung."""
        with self._lock:
            return set(self.paused)

    def _note_trainer(self, action: str, trainer: Stalled) -> None:
        with self._lock:
            self.ledger.note_trainer(action, trainer, time.time())

    def _alive(self, entry: contract.Registration) -> bool:
        """Whether ``entry`` is still the trainer that registered (not dead, not reused)."""
        return contract.identity_mismatch(entry, self.registry) is None

    def recover(self, trip: Trip) -> None:
        """The node is healthy again: resume paused trainers and tell the webhook."""
        self._note("recover", trip)
        with self._lock:
            paused, self.paused = self.paused, {}
        for pid, entry in sorted(paused.items()):
            if self._send(entry, signal.SIGCONT):
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
        scan = contract.scan_registry(self.registry)
        self._account(scan.ignored, scan_done=True)
        if not scan.trainers:
            log.info("action=signal_trainers probe=%s result=no registered trainers", trip.probe)
        for entry in scan.trainers:
            run_dir = Path(entry.run_dir)
            before = len(contract.read_emergency_records(run_dir))
            if not self._send(entry, contract.EMERGENCY_SIGNAL):
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
                args=(entry, run_dir, before, trip),
                name="checkpoint-wait",
                daemon=True,
            ).start()

    def _await_checkpoint(
        self, entry: contract.Registration, run_dir: Path, before: int, trip: Trip
    ) -> None:
        """Report detection -> committed checkpoint, then pause the trainer if configured."""
        pid = entry.pid
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
        if self.cfg.pause_trainers and self._send(entry, signal.SIGSTOP):
            with self._lock:
                self.paused[pid] = entry
                self.ledger.note("pause_trainer", time.time())
            log.warning("action=pause_trainer pid=%d probe=%s", pid, trip.probe)

    def _send(self, entry: contract.Registration, sig: signal.Signals) -> bool:
        """Signal ``entry`` only if it is still the trainer that registered, else refuse.

        The pidfd is opened before the check, so the check is about the very process
        the signal then reaches; without pidfds the window is the few microseconds
        between the check and ``os.kill``.
        """
        pidfd = _pidfd_open(entry.pid)
        try:
            refused = contract.confirm(entry, self.registry)
            if refused is not None:
                log.warning(
                    "action=signal_refused pid=%d signal=%s reason=%s detail=%s",
                    entry.pid,
                    sig.name,
                    refused.reason.value,
                    refused.detail,
                )
                self._account([refused], scan_done=False)
                return False
            return _deliver(entry.pid, pidfd, sig)
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def _account(self, ignored: list[contract.IgnoredRecord], scan_done: bool) -> None:
        """Log and count each ignored record once, not again at every trip.

        After a full scan only the records still present are remembered, so the set
        stays as small as the registry's leftovers (e.g. stale files the daemon may not
        remove because its registry is read-only).
        """
        with self._lock:
            fresh = [r for r in ignored if r.key not in self._seen_ignored]
            keys = {r.key for r in ignored}
            self._seen_ignored = keys if scan_done else self._seen_ignored | keys
            for record in fresh:
                self.ledger.note_ignored(record.reason)
        for record in fresh:
            log.warning(
                "registration=ignored pid=%s reason=%s file=%s removed=%s detail=%s",
                record.pid,
                record.reason.value,
                record.path,
                "yes" if record.removed else "no",
                record.detail,
            )

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


def _pidfd_open(pid: int) -> int | None:
    """A pidfd pinning ``pid``, or ``None`` (no such process, old kernel, seccomp EPERM)."""
    if pid <= 0:
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def _deliver(pid: int, pidfd: int | None, sig: signal.Signals) -> bool:
    try:
        if pidfd is None:
            os.kill(pid, sig)
        else:
            signal.pidfd_send_signal(pidfd, sig)
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
