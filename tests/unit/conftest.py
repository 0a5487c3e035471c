"""Fixtures of the unit tier: a spy on playbook runs, a recording stand-in for ssh, and
processes that are ended by pid whatever the test did."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodeprep import runner, wheel

TWO_NODES = "[nodes]\ngpu01 ansible_host=gpu01.invalid\ngpu02 ansible_host=gpu02.invalid\n"


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    """An inventory of two nodes whose names resolve nowhere (.invalid)."""
    path = tmp_path / "fleet.ini"
    path.write_text(TWO_NODES)
    return path


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[runner.RunRequest]:
    """Records every playbook run the CLI starts (a spy: none may start on bad input)."""
    started: list[runner.RunRequest] = []

    def record(request: runner.RunRequest, on_progress: object = None) -> runner.RunResult:
        started.append(request)
        return runner.RunResult(status="successful", rc=0, recap={}, failures=[])

    monkeypatch.setattr(runner, "run", record)
    # Building the controller's wheel is covered by the integration tier; not needed here.
    monkeypatch.setattr(wheel, "controller_wheel", lambda cache: None)
    return started


@pytest.fixture
def ssh_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in ``ssh`` first on PATH that records its arguments and connects nowhere.

    Returns the log file; a test asserts it stays absent (no connection was attempted).
    """
    bin_dir = tmp_path / "standin-bin"
    bin_dir.mkdir()
    log = tmp_path / "ssh-calls.log"
    for name in ("ssh", "scp", "sftp"):
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\nexit 255\n')
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return log


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start processes; every one is killed by pid and reaped, whatever the test did."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*argv: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(list(argv))
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)
