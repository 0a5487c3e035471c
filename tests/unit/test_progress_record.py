"""The trainer's progress record: what a reader sees is always one whole step."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeprep import contract
from nodeprep.progress import (
    SIZE,
    Phase,
    ProgressInFlight,
    ProgressUnreadable,
    ProgressWriter,
    progress_path,
    read_progress,
)


def test_steps_are_read_back_with_the_median_of_recent_step_times(tmp_path: Path) -> None:
    writer = ProgressWriter(tmp_path / "1.progress", rank=3, now=100.0)
    started = read_progress(writer.path)
    assert started is not None
    assert (started.step, started.phase, started.rank) == (0, Phase.STARTUP, 3)
    assert started.last_step_time == 100.0  # the start-up counts from its beginning
    assert started.median_step_s == 0.0
    for step, when in enumerate((101.0, 101.5, 102.5, 103.0), start=1):
        writer.step(step, 1.0 / step, now=when)
    seen = read_progress(writer.path)
    assert seen is not None
    assert (seen.step, seen.loss, seen.last_step_time, seen.phase) == (4, 0.25, 103.0, Phase.TRAIN)
    assert seen.median_step_s == 0.5  # of 0.5, 1.0, 0.5: the first step is not timed
    assert oct(os.stat(writer.path).st_mode & 0o777) == "0o644"  # the watchdog reads it


def test_a_checkpoint_is_published_and_left_out_of_the_median(tmp_path: Path) -> None:
    writer = ProgressWriter(tmp_path / "1.progress", rank=0, now=0.0)
    for step in range(1, 6):
        writer.step(step, 0.1, now=float(step))
    with writer.phase(Phase.CHECKPOINT, now=5.5):
        during = read_progress(writer.path)
        assert during is not None
        assert during.phase is Phase.CHECKPOINT
        assert during.phase_since == 5.5
    writer.step(6, 0.1, now=60.0)  # 55 s, most of it the save: not a step time
    writer.step(7, 0.1, now=61.0)
    after = read_progress(writer.path)
    assert after is not None
    assert after.phase is Phase.TRAIN
    assert after.median_step_s == 1.0


def test_a_reader_never_sees_two_steps_mixed(tmp_path: Path) -> None:
    """A trainer process stepping very fast; every reading's loss belongs to its step."""
    path = tmp_path / "1.progress"
    writer = subprocess.Popen([sys.executable, "-c", WRITE_FOREVER, str(path)])
    try:
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        steps: set[int] = set()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                seen = read_progress(path)
            except ProgressInFlight:  # the writer was preempted mid-write for a while: ask again
                continue
            assert seen is not None
            assert seen.loss == float(seen.step) or seen.step == 0, seen
            steps.add(seen.step)
    finally:
        writer.kill()
        writer.wait()
    assert len(steps) > 20  # the reads really overlapped the writes (even on a loaded machine)


# A step every 50 us: 20 times faster than a fast real training step.
WRITE_FOREVER = """
import sys, time
from pathlib import Path
from nodeprep.progress import ProgressWriter
writer = ProgressWriter(Path(sys.argv[1]), rank=0)
step = 0
while True:
    step += 1
    writer.step(step, float(step))
    due = time.perf_counter() + 50e-6
    while time.perf_counter() < due:
        pass
"""


def test_close_removes_the_record_and_a_missing_one_reads_as_none(tmp_path: Path) -> None:
    writer = ProgressWriter(tmp_path / "1.progress", rank=0)
    writer.close()
    assert not writer.path.exists()
    assert read_progress(writer.path) is None


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"short", "5 bytes, not a progress record"),
        (b"XXXX" + bytes(SIZE - 4), "not a version 1 progress record"),
    ],
)
def test_a_file_that_is_no_record_is_named(tmp_path: Path, content: bytes, why: str) -> None:
    path = tmp_path / "1.progress"
    path.write_bytes(content)
    with pytest.raises(ProgressUnreadable, match=why):
        read_progress(path)


def test_a_record_left_mid_write_is_unreadable_not_a_guess(tmp_path: Path) -> None:
    writer = ProgressWriter(tmp_path / "1.progress", rank=0)
    data = bytearray(writer.path.read_bytes())
    data[8] |= 1  # an odd sequence: a writer died inside a write
    writer.path.write_bytes(bytes(data))
    with pytest.raises(ProgressInFlight, match="mid-write"):
        read_progress(writer.path)


def test_a_stale_registration_takes_its_progress_with_it(tmp_path: Path) -> None:
    registry = tmp_path / "trainers"
    registry.mkdir()
    dead = contract.Registration(2**22 + 11, str(tmp_path), 0.0, start_ticks=1, boot_id=None)
    (registry / f"{dead.pid}.json").write_text(dead.to_json())
    ProgressWriter(progress_path(dead.pid, registry), rank=0)
    scan = contract.scan_registry(registry)
    assert [r.reason for r in scan.ignored] == [contract.IgnoreReason.DEAD_PID]
    assert list(registry.iterdir()) == []
