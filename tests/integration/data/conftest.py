"""Fixtures of the download tests: a random multi-megabyte file and a flaky server serving it."""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeprep.data import RetryPolicy

from .flaky_server import FlakyServer

FILE_SIZE = 4 << 20
MIB = 1 << 20
# Small waits keep each test to seconds; the attempt budget still covers a 1-2 s outage.
FAST = RetryPolicy(
    max_attempts=40, max_seconds=15, base_delay=0.02, max_delay=0.3, timeout_seconds=3
)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="session")
def content() -> bytes:
    return random.Random(20240101).randbytes(FILE_SIZE)


@pytest.fixture
def server(content: bytes) -> Iterator[FlakyServer]:
    """The flaky server, stopped (every thread of it joined) even when the test fails."""
    before = set(threading.enumerate())
    flaky = FlakyServer(content).__enter__()
    try:
        yield flaky
    finally:
        flaky.stop()
    leftover = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not leftover, f"threads left running after the server stopped: {leftover}"


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    return tmp_path / "data.bin"


def leftovers(dest: Path) -> list[str]:
    """Every name in dest's directory: a failed download must leave none of its own."""
    return sorted(path.name for path in dest.parent.iterdir())
