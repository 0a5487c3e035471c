"""What the watchdog does with hung trainers: their stacks first, then the escalation.

In order, as ``actions.hang`` configures it:

1. STACKS_SIGNAL to every hung rank, so each writes every thread's Python stack to its
   dump file in the run directory (the trainer's faulthandler answers from the signal
   handler, even inside a collective); the response waits ``dump_wait_s`` for the files.
2. Each signal of ``signals`` in turn (default SIGTERM, then SIGKILL), to the ranks that
   are still the trainers that registered, each followed by SIGCONT so that a stopped
   process can act on it (as systemd does when it stops a unit), then up to ``grace_s``
   for them to exit. SIGTERM lets the job's own restart path run (torchrun restarts the
   group, the trainer resumes from its newest verified checkpoint); SIGKILL ends a rank
   that cannot act on it, such as one blocked in a collective.

A dump that appears only after the SIGCONT (a rank that was stopped) is reported as late.
Every signal goes through the same identity check as the emergency signal; a trainer whose
identity cannot be confirmed is never signalled. The response runs in its own thread: the
grace periods never delay the watchdog's loop.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodeprep import contract
from nodeprep.heartbeat.config import HangConfig
from nodeprep.heartbeat.progress_probe import Stalled

log = logging.getLogger(__name__)
Send = Callable[[contract.Registration, signal.Signals], bool]
_POLL_S = 0.05


@dataclass
class Dump:
    """One rank's stack dump file and its size before the request."""

    stalled: Stalled
    path: Path
    size_before: int
    written: bool = False

    def grew(self) -> bool:
        return _size(self.path) > self.size_before


class HangResponse:
    """Dumps stacks and escalates for one hang (one call of :meth:`run`)."""

    def __init__(
        self,
        cfg: HangConfig,
        send: Send,
        alive: Callable[[contract.Registration], bool],
        note: Callable[[str, Stalled], None],
    ) -> None:
        self.cfg, self.send, self.alive, self.note = cfg, send, alive, note

    def run(self, stalled: list[Stalled]) -> None:
        for trainer in stalled:
            self.note("hang", trainer)
        dumps = self._request_dumps(stalled) if self.cfg.dump_stacks else []
        self._escalate(stalled)
        for dump in dumps:
            if not dump.written and dump.grew():
                self._dumped(dump, "late (the rank ran again only after SIGCONT)")
            elif not dump.written:
                log.error(
                    "action=stack_dump pid=%d file=%s result=missing (the rank never ran its "
                    "signal handler: blocked signals, or gone before it could)",
                    dump.stalled.entry.pid,
                    dump.path,
                )

    def _request_dumps(self, stalled: list[Stalled]) -> list[Dump]:
        dumps = []
        for trainer in stalled:
            run_dir = Path(trainer.entry.run_dir)
            path = contract.stack_dump_path(run_dir, trainer.progress.rank, trainer.entry.pid)
            dump = Dump(trainer, path, _size(path))
            if self.send(trainer.entry, contract.STACKS_SIGNAL):
                dumps.append(dump)
        deadline = time.monotonic() + self.cfg.dump_wait_s
        while True:
            for dump in dumps:
                if not dump.written and dump.grew():
                    self._dumped(dump, "written")
            if all(d.written for d in dumps) or time.monotonic() >= deadline:
                return dumps
            time.sleep(_POLL_S)

    def _dumped(self, dump: Dump, result: str) -> None:
        dump.written = True
        self.note("stack_dump", dump.stalled)
        log.warning(
            "action=stack_dump pid=%d rank=%d file=%s result=%s",
            dump.stalled.entry.pid,
            dump.stalled.progress.rank,
            dump.path,
            result,
        )

    def _escalate(self, stalled: list[Stalled]) -> None:
        for name in self.cfg.signals:
            live = [s for s in stalled if self.alive(s.entry)]
            if not live:
                return
            sig = signal.Signals[name]
            for trainer in live:
                if self.send(trainer.entry, sig):
                    self.note(f"hang_{name.lower()}", trainer)
                    log.warning(
                        "action=hang_%s pid=%d rank=%d run_dir=%s",
                        name.lower(),
                        trainer.entry.pid,
                        trainer.progress.rank,
                        trainer.entry.run_dir,
                    )
                    if sig is not signal.SIGKILL:
                        self.send(trainer.entry, signal.SIGCONT)
            deadline = time.monotonic() + self.cfg.grace_s
            while time.monotonic() < deadline and any(self.alive(s.entry) for s in live):
                time.sleep(_POLL_S)
        left = [s.entry.pid for s in stalled if self.alive(s.entry)]
        if left and self.cfg.signals:
            log.error("action=hang_escalation pids=%s result=still running", left)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
