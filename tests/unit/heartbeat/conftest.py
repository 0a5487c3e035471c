"""Fixtures: local endpoints, a daemon running in a thread, dummy trainer processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hb_endpoints import Endpoint
from hb_support import RunningDaemon, wait_for

from nodeprep.heartbeat import config as config_mod
from nodeprep.heartbeat.daemon import Daemon

HERE = Path(__file__).resolve().parent
DUMMY_TRAINER = HERE / "dummy_trainer.py"


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    ep = Endpoint().start()
    try:
        yield ep
    finally:
        ep.stop()


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
) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], Path]]]:
    """Start a dummy trainer: ``start(name, *options)`` (see dummy_trainer.py)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *options: str) -> tuple[subprocess.Popen[bytes], Path]:
        run_dir = tmp_path / name
        env = dict(os.environ, NODEPREP_RUN_DIR=str(tmp_path / "run"))
        argv = [sys.executable, str(DUMMY_TRAINER), str(run_dir), *options]
        proc = subprocess.Popen(argv, env=env)
        procs.append(proc)
        wait_for((run_dir / "ready").exists, 10, f"trainer {name} to register")
        return proc, run_dir

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, 18)  # SIGCONT, in case a test left it paused
            proc.terminate()
            try:
                proc.wait(2)  # a stand-in leaves within one step
            except subprocess.TimeoutExpired:  # a hung stand-in ignores SIGTERM, as meant
                proc.kill()
                proc.wait(5)
