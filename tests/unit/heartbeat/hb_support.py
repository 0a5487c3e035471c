"""Helpers shared by the heartbeat unit tests (a unique module name, unlike conftest)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from nodeprep.heartbeat.daemon import Daemon


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll until ``predicate()`` is truthy; fail the test naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class RunningDaemon:
    """A Daemon driven by its own thread, stopped by the fixture."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.stop = threading.Event()
        self.thread = threading.Thread(target=daemon.run, args=(self.stop,), daemon=True)
        self.trips: list[tuple[float, str, str]] = []
        self.observed: list[tuple[float, str, bool, str]] = []
        original = daemon.actions.trip
        observe = daemon._observe

        def recording_observe(cfg: Any, outcome: Any) -> None:
            observe(cfg, outcome)
            state = daemon.states[cfg.name].state.value
            self.observed.append((time.time(), cfg.name, outcome.ok, state))

        def recording_trip(trip: Any) -> None:
            self.trips.append((time.time(), trip.probe, trip.evidence))
            original(trip)

        daemon.actions.trip = recording_trip  # type: ignore[method-assign]
        daemon._observe = recording_observe  # type: ignore[method-assign]
        self.thread.start()

    def state(self, probe: str) -> str:
        return self.daemon.states[probe].state.value
