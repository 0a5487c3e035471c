"""Fixtures: local endpoints, a daemon running in a thread, dummy trainer processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hb_endpoints import Endpoint

from nodeprep.heartbeat import config as config_mod
from nodeprep.heartbeat.daemon import Daemon

HERE = Path(__file__).resolve().parent
DUMMY_TRAINER = HERE / "dummy_trainer.py"


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll until ``predicate()`` is truthy; fail the test naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    ep = Endpoint().start()
    try:
        yield ep
    finally:
        ep.stop()


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


@pytest.fixture
def run_daemon(tmp_path: Path) -> Iterator[Callable[..., RunningDaemon]]:
    started: list[RunningDaemon] = []

    def start(raw: dict[str, Any], **kw: Any) -> RunningDaemon:
        raw.setdefault("registry_dir", str(tmp_path / "run" / "trainers"))
        raw.setdefault("actions", {}).setdefault("min_trip_interval_s", 0)
        kw.setdefault("nvml", None)
        running = RunningDaemon(Daemon(config_mod.parse(raw), **kw))
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop.set()
        running.thread.join(5)


@pytest.fixture
def start_trainer(
    tmp_path: Path,
) -> Iterator[Callable[[str], tuple[subprocess.Popen[bytes], Path]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> tuple[subprocess.Popen[bytes], Path]:
        run_dir = tmp_path / name
        env = dict(os.environ, NODEPREP_RUN_DIR=str(tmp_path / "run"))
        proc = subprocess.Popen([sys.executable, str(DUMMY_TRAINER), str(run_dir)], env=env)
        procs.append(proc)
        wait_for((run_dir / "ready").exists, 10, f"trainer {name} to register")
        return proc, run_dir

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, 18)  # SIGCONT, in case a test left it paused
            proc.terminate()
            proc.wait(5)
