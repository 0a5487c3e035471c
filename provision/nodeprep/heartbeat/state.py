"""Per-probe and node state with hysteresis, so single blips and slow answers never trip.

healthy -> suspect on the first failure; suspect -> failed after ``fail_threshold``
consecutive failures (a notice jumps straight to failed); failed -> healthy only after
``recover_threshold`` consecutive successes; suspect -> healthy on any success.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nodeprep.heartbeat.probes import Outcome


class State(enum.Enum):
    """A probe's (or the node's) health."""

    HEALTHY = "healthy"
    SUSPECT = "suspect"
    FAILED = "failed"
    SKIPPED = "skipped"


class Transition(enum.Enum):
    """What changed as a result of one outcome, when it matters to actions."""

    FAILED = "failed"
    RECOVERED = "recovered"


@dataclass
class ProbeState:
    """The hysteresis counters of one probe."""

    fail_threshold: int
    recover_threshold: int
    state: State = State.HEALTHY
    failures: int = 0
    successes: int = 0
    last: Outcome | None = None

    def observe(self, outcome: Outcome) -> Transition | None:
        """Feed one outcome; return a transition into or out of FAILED, if any."""
        self.last = outcome
        if outcome.skipped:
            self.state, self.failures, self.successes = State.SKIPPED, 0, 0
            return None
        if outcome.ok:
            return self._success()
        self.successes = 0
        self.failures += 1
        if self.state is State.FAILED:
            return None
        if outcome.notice or self.failures >= self.fail_threshold:
            self.state = State.FAILED
            return Transition.FAILED
        self.state = State.SUSPECT
        return None

    def _success(self) -> Transition | None:
        self.failures = 0
        self.successes += 1
        if self.state is not State.FAILED:
            self.state = State.HEALTHY
            return None
        if self.successes >= self.recover_threshold:
            self.state = State.HEALTHY
            return Transition.RECOVERED
        return None


def node_state(states: list[State]) -> State:
    """The node is as bad as its worst probe; skipped probes do not count."""
    if State.FAILED in states:
        return State.FAILED
    if State.SUSPECT in states:
        return State.SUSPECT
    if states and all(s is State.SKIPPED for s in states):
        return State.SKIPPED
    return State.HEALTHY
