"""A trainer's progress, published at every step for the watchdog (part of the contract).

A registered trainer keeps ``<registry>/<pid>.progress`` beside its registration: a fixed
64-byte record it rewrites in place through a shared memory map at every step (a handful
of stores, no system call, no file growing), so publishing costs microseconds even for
steps of a millisecond. The watchdog reads it with one ``pread``; the registry lives on
tmpfs (``/run``), so the reader sees the writer's page directly.

The record is a seqlock: the writer makes the sequence odd, writes the fields, then makes
it even. A reader that sees an odd sequence, or a different one after reading, caught a
write in flight and reads again; it never acts on a mix of two steps.

The trainer also computes the median of its recent step times here, so the watchdog's
allowance ("no new step within 10 x the median step") needs no history of its own and
survives a watchdog restart. Step times that span a checkpoint or the start-up are left
out of the median: they say nothing about how long a step takes.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import mmap
import os
import statistics
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeprep import contract

MAGIC = b"NPPG"
VERSION = 1
# The record: a header (magic, version) written once, the sequence, then the fields (step,
# last step as Unix time, loss, median step s, phase, rank, phase start as Unix time),
# padded to 64 bytes. Each part is packed aside and copied in whole: struct.pack_into
# zeroes its target first, which a reader could catch.
_HEADER = struct.Struct("<4sI")
_SEQ = struct.Struct("<Q")
_FIELDS = struct.Struct("<qdddIid")
_SEQ_OFFSET = _HEADER.size
_FIELDS_OFFSET = _SEQ_OFFSET + _SEQ.size
SIZE = 64
_WINDOW = 31  # step times in the median: enough to ride out one slow step
# A write takes about a microsecond, but its writer can be preempted inside it: a reader
# spins a little, then retries for a while before it calls the record stuck mid-write.
_SPIN_TRIES = 100
_RETRY_S = 0.05


class Phase(enum.IntEnum):
    """What the trainer is doing; the watchdog allows longer between steps in some phases."""

    STARTUP = 0  # building the model, restoring a checkpoint, the first step
    TRAIN = 1
    CHECKPOINT = 2  # a save that blocks the loop (a synchronous or emergency save)


@dataclass(frozen=True)
class Progress:
    """One consistent reading of a trainer's record."""

    step: int
    last_step_time: float  # Unix time the step completed (the phase start before any step)
    loss: float
    median_step_s: float  # 0.0 until two steps were timed
    phase: Phase
    rank: int
    phase_since: float


def progress_path(pid: int, registry: Path | None = None) -> Path:
    """Where the trainer with ``pid`` publishes its progress."""
    return (registry or contract.registry_dir()) / f"{pid}{contract.PROGRESS_SUFFIX}"


class ProgressWriter:
    """The trainer's side: a mapped record rewritten at every step.

    Created once the trainer is registered (so its file sits next to the registration) and
    closed, with the file removed, when the trainer unregisters.
    """

    def __init__(self, path: Path, rank: int, now: float | None = None) -> None:
        self.path = path
        self.rank = rank
        self._seq = 0
        self._times: collections.deque[float] = collections.deque(maxlen=_WINDOW)
        started = time.time() if now is None else now
        self._step, self._loss, self._median = 0, float("nan"), 0.0
        self._last, self._phase, self._since = started, Phase.STARTUP, started
        self._timed_from: float | None = None  # the last step time a next step may be timed from
        # Written in full under a temporary name, then renamed: a reader never finds the
        # file before its first record.
        staging = path.with_name(f".{path.name}.new")
        fd = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.fchmod(fd, 0o644)  # the watchdog runs as another user
            os.ftruncate(fd, SIZE)
            self._map = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._map[: _HEADER.size] = _HEADER.pack(MAGIC, VERSION)
        self._publish()
        os.replace(staging, path)

    def step(self, step: int, loss: float, now: float | None = None) -> None:
        """Record a completed step (called at every step boundary)."""
        when = time.time() if now is None else now
        if self._timed_from is not None:
            self._times.append(when - self._timed_from)
            self._median = statistics.median(self._times)
        if self._phase is not Phase.TRAIN:
            self._phase, self._since = Phase.TRAIN, when
        self._step, self._loss, self._last, self._timed_from = step, loss, when, when
        self._publish()

    @contextlib.contextmanager
    def phase(self, phase: Phase, now: float | None = None) -> Iterator[None]:
        """Mark a stretch of the loop (a blocking save); the step after it is not timed."""
        before = self._phase
        self._set_phase(phase, time.time() if now is None else now)
        try:
            yield
        finally:
            self._timed_from = None
            self._set_phase(before, time.time())

    def _set_phase(self, phase: Phase, when: float) -> None:
        self._phase, self._since = phase, when
        self._publish()

    def _publish(self) -> None:
        fields = _FIELDS.pack(
            self._step, self._last, self._loss, self._median, int(self._phase), self.rank,
            self._since,
        )  # fmt: skip
        self._seq += 1  # odd: a write is in flight
        self._map[_SEQ_OFFSET:_FIELDS_OFFSET] = _SEQ.pack(self._seq)
        self._map[_FIELDS_OFFSET : _FIELDS_OFFSET + _FIELDS.size] = fields
        self._seq += 1
        self._map[_SEQ_OFFSET:_FIELDS_OFFSET] = _SEQ.pack(self._seq)

    def close(self) -> None:
        """Unmap and remove the record (the trainer is leaving the registry)."""
        with contextlib.suppress(ValueError):
            self._map.close()
        self.path.unlink(missing_ok=True)


class ProgressUnreadable(ValueError):
    """The file exists but holds no valid record; ``str()`` says why."""


class ProgressInFlight(ProgressUnreadable):
    """The record stayed mid-write while the reader retried: its writer stopped inside a
    write (a SIGSTOP at that instant). The reader's last reading stands for it."""


def read_progress(path: Path) -> Progress | None:
    """The trainer's latest consistent record, or ``None`` where it publishes none.

    Raises ProgressUnreadable for a file that is not a record (wrong size, magic, version),
    and ProgressInFlight for one that stays mid-write while it retries.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size != SIZE:
            raise ProgressUnreadable(f"{path}: {size} bytes, not a progress record")
        if _HEADER.unpack(os.pread(fd, _HEADER.size, 0)) != (MAGIC, VERSION):
            raise ProgressUnreadable(f"{path}: not a version {VERSION} progress record")
        deadline = time.monotonic() + _RETRY_S
        tries = 0
        while tries < _SPIN_TRIES or time.monotonic() < deadline:
            before = _sequence(fd)
            data = os.pread(fd, SIZE, 0)
            inside = _SEQ.unpack_from(data, _SEQ_OFFSET)[0]
            if before % 2 == 0 and inside == before and _sequence(fd) == before:
                return _progress(path, _FIELDS.unpack_from(data, _FIELDS_OFFSET))
            tries += 1
            if tries >= _SPIN_TRIES:
                time.sleep(0.001)
    finally:
        os.close(fd)
    raise ProgressInFlight(f"{path}: the record stayed mid-write for {_RETRY_S:g} s")


def _sequence(fd: int) -> int:
    return int(_SEQ.unpack(os.pread(fd, _SEQ.size, _SEQ_OFFSET))[0])


def _progress(path: Path, fields: tuple[Any, ...]) -> Progress:
    step, last, loss, median, phase, rank, since = fields
    try:
        known = Phase(phase)
    except ValueError as err:
        raise ProgressUnreadable(f"{path}: unknown phase {phase!r}") from err
    return Progress(step, last, loss, median, known, rank, since)
