"""Run every probe on its own interval in its own worker, with a hard deadline per attempt.

An attempt that has not answered by its deadline counts as one failure at that moment.
Most probes have at most one attempt in flight: if it is still stuck when the next interval
comes, that interval counts as another failure and no second worker is started, so a hung
endpoint costs one thread, never the loop and never a pile of threads.

Network probes (``hedge``) are faster to convince and harder to fool:
- an attempt still unanswered ``retry_interval`` after it started is joined by another
  one (a hedge), up to ``fail_threshold`` in flight, until one of them answers. A hung
  endpoint then fails ``fail_threshold`` attempts within timeout + (fail_threshold - 1) x
  retry_interval of the first, while one lost packet is answered by the next hedge;
- an answer supersedes every older attempt still in flight (their failures are not counted);
- after a failure that has not tripped, the daemon calls ``hurry``: the next attempt comes
  ``retry_interval`` later instead of a whole interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from nodeprep.heartbeat.config import ProbeConfig
from nodeprep.heartbeat.probes import Attempt, Outcome

log = logging.getLogger(__name__)


@dataclass
class _InFlight:
    future: Future[Outcome]
    started: float
    deadline: float
    reported: bool = False  # its failure was counted at the deadline, or it was superseded


class ProbeRunner:
    """Scheduling state of one probe."""

    def __init__(
        self, cfg: ProbeConfig, attempt: Attempt, first_due: float, hedge: bool = False
    ) -> None:
        self.cfg = cfg
        self.attempt = attempt
        self.next_due = first_due
        self.hedge = hedge
        self.limit = max(1, cfg.fail_threshold) if hedge else 1
        self.flights: list[_InFlight] = []
        self.answered = True  # the newest scheduled attempt's round has its answer: no hedge

    def _waiting(self) -> list[_InFlight]:
        return [f for f in self.flights if not f.reported]

    def _hedge_at(self) -> float | None:
        """When the next hedge is due: the newest attempt unanswered for retry_interval."""
        waiting = self._waiting()
        if not self.hedge or self.answered or not waiting or len(self.flights) >= self.limit:
            return None
        return max(f.started for f in waiting) + self.cfg.retry_interval

    def wake_at(self) -> float:
        """The next instant this runner needs attention."""
        times = [self.next_due] + [f.deadline for f in self._waiting()]
        hedge = self._hedge_at()
        return min(times + ([hedge] if hedge is not None else []))

    def hurry(self, now: float) -> None:
        """Bring the next attempt forward to a retry: the last outcome was a failure.

        An attempt still within its timeout is left to answer; its outcome hurries again.
        """
        if self._waiting():
            return
        self.next_due = min(self.next_due, now + self.cfg.retry_interval)

    def _start(self, now: float, submit: Callable[[Attempt], Future[Outcome]]) -> None:
        self.flights.append(_InFlight(submit(self.attempt), now, now + self.cfg.timeout))

    def step(self, now: float, submit: Callable[[Attempt], Future[Outcome]]) -> list[Outcome]:
        """Collect finished or overdue attempts, and start the next one when due."""
        out: list[Outcome] = []
        for flight in sorted(self.flights, key=lambda f: f.started):
            if flight.future.done():
                self.flights.remove(flight)
                if flight.reported:
                    continue
                outcome = _result(flight.future, self.cfg)
                out.append(outcome)
                if outcome.ok:  # an answer: older attempts still out say nothing new
                    self.answered = True
                    for older in self.flights:
                        if older.started <= flight.started:
                            older.reported = True
            elif not flight.reported and now >= flight.deadline:
                late = now - flight.deadline + self.cfg.timeout
                out.append(Outcome(False, f"no answer within {self.cfg.timeout:g} s", late))
                flight.reported = True
        hedge = self._hedge_at()
        if hedge is not None and now >= hedge:
            self._start(now, submit)
        if now >= self.next_due:
            self.next_due = max(self.next_due + self.cfg.interval, now)
            if len(self.flights) < self.limit:
                self._start(now, submit)
                self.answered = False
            elif not self._waiting():
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
