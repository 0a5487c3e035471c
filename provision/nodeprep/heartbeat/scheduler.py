"""Run every probe on its own interval in its own worker, with a hard deadline per attempt.

Each probe has at most one attempt in flight. An attempt that has not answered by its
deadline counts as one failure at that moment; if it is still stuck when the next
interval comes, that interval counts as another failure and no second worker is started,
so a hung endpoint costs one thread, never the loop and never a pile of threads.

After a failure that has not tripped yet, the daemon calls ``hurry``: the next attempt
comes ``retry_interval`` later instead of a whole interval, so an outage is confirmed in
a few retries. An attempt already past its deadline when a retry is due counts as one
more failure, as at any interval; a slow attempt within its timeout is left to answer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from nodeprep.heartbeat.config import ProbeConfig
from nodeprep.heartbeat.probes import Attempt, Outcome

log = logging.getLogger(__name__)


class ProbeRunner:
    """Scheduling state of one probe."""

    def __init__(self, cfg: ProbeConfig, attempt: Attempt, first_due: float) -> None:
        self.cfg = cfg
        self.attempt = attempt
        self.next_due = first_due
        self.future: Future[Outcome] | None = None
        self.deadline = 0.0
        self.reported = False

    def wake_at(self) -> float:
        """The next instant this runner needs attention."""
        if self.future is not None and not self.reported:
            return min(self.next_due, self.deadline)
        return self.next_due

    def hurry(self, now: float) -> None:
        """Bring the next attempt forward to a retry: the last outcome was a failure.

        An attempt still within its timeout is left to answer; its outcome hurries again.
        """
        if self.future is not None and not self.reported:
            return
        self.next_due = min(self.next_due, now + self.cfg.retry_interval)

    def step(self, now: float, submit: Callable[[Attempt], Future[Outcome]]) -> list[Outcome]:
        """Collect a finished or overdue attempt, and start the next one when due."""
        out: list[Outcome] = []
        if self.future is not None:
            if self.future.done():
                if not self.reported:
                    out.append(_result(self.future, self.cfg))
                self.future = None
            elif not self.reported and now >= self.deadline:
                late = now - self.deadline + self.cfg.timeout
                out.append(Outcome(False, f"no answer within {self.cfg.timeout:g} s", late))
                self.reported = True
        if now >= self.next_due:
            self.next_due = max(self.next_due + self.cfg.interval, now)
            if self.future is None:
                self.future = submit(self.attempt)
                self.deadline = now + self.cfg.timeout
                self.reported = False
            else:
                out.append(Outcome(False, "previous attempt still hung", self.cfg.timeout))
        return out


def _result(future: Future[Outcome], cfg: ProbeConfig) -> Outcome:
    try:
        return future.result()
    except Exception as err:  # an attempt must never take the daemon down
        log.exception("probe %s raised", cfg.name)
        return Outcome(False, f"probe error: {type(err).__name__}: {err}", 0.0)


class Scheduler:
    """Drives all runners; ``poll`` blocks until something is due or a result arrives."""

    def __init__(self, runners: list[ProbeRunner]) -> None:
        self.runners = runners
        self.wake = threading.Event()

    def _submit(self, attempt: Attempt) -> Future[Outcome]:
        """Run one attempt in a daemon thread, so a hung one never blocks exit."""
        future: Future[Outcome] = Future()
        future.set_running_or_notify_cancel()

        def work() -> None:
            try:
                future.set_result(attempt())
            except BaseException as err:
                future.set_exception(err)
            self.wake.set()

        threading.Thread(target=work, name="probe", daemon=True).start()
        return future

    def poll(self, max_wait: float) -> list[tuple[ProbeRunner, Outcome]]:
        """Wait (at most ``max_wait``) for the next event, then return new outcomes."""
        now = time.monotonic()
        wait = min(max_wait, min(r.wake_at() for r in self.runners) - now)
        if wait > 0:
            self.wake.wait(wait)
        self.wake.clear()
        now = time.monotonic()
        results: list[tuple[ProbeRunner, Outcome]] = []
        for runner in self.runners:
            results.extend((runner, o) for o in runner.step(now, self._submit))
        return results
