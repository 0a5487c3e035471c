"""Writers that turn a host-memory snapshot into a committed checkpoint.

``AsyncWriter`` does serialisation, hashing, fsync, the rename and retention
in a separate *process*: in a thread the pickling and hashing would hold the
GIL against the training loop. Tensors reach it through shared memory, so the
only copy the trainer pays for is the snapshot itself. One save is in flight
at most; a new request first waits for the previous one, which is also what
makes reusing the staging buffers safe. Both writers hand back every result
through ``collect``, so no result, failed or not, can go unread.

The writer process is a fresh interpreter that imports torch: seconds on a fast node, tens
of them on a slow one (25 s were seen on the lab's emulated VM). Until it says it has
started, ``AsyncWriter`` writes in the calling process, as ``SyncWriter`` does: a save in
a job's first seconds, above all an emergency save on a spot notice, never waits for that
start-up.
"""

from __future__ import annotations

import ctypes
import logging
import os
import queue
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as tmp

from nodeprep.checkpoint.durable import CheckpointWriteError, Part, commit_checkpoint, commit_part
from nodeprep.checkpoint.snapshot import StagingArea, flatten, unflatten
from nodeprep.checkpoint.store import apply_retention

log = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class SaveResult:
    """How one save ended: ``path`` when committed, ``error`` (one sentence) when not."""

    step: int
    layer: str
    path: str | None
    error: str | None
    committed_time: float
    write_seconds: float
    nbytes: int
    part: bool = False  # a sharded save's part written by a rank other than 0 (rank 0 commits)


def write_and_prune(
    root: Path,
    step: int,
    layer: str,
    payloads: dict[str, Any],
    *,
    keep: int,
    extra: dict[str, Any],
) -> SaveResult:
    """Commit one checkpoint and apply retention only once it is committed.

    With ``extra["part"]`` (a sharded save) this writes this rank's part; rank 0 waits for
    every part, commits and applies retention, the other ranks' results mean "part written".
    """
    started = time.monotonic()
    part = extra.get("part")
    try:
        if part is None:
            path = commit_checkpoint(root, step, layer, payloads, extra)
            nbytes = sum(p.stat().st_size for p in path.iterdir())
        else:
            rest = {key: value for key, value in extra.items() if key != "part"}
            path, nbytes = commit_part(root, step, layer, payloads, Part(**part), rest)
    except CheckpointWriteError as exc:
        return SaveResult(step, layer, None, str(exc), time.time(), 0.0, 0)
    committed_time = time.time()
    elapsed = time.monotonic() - started
    if part is not None and part["rank"] != 0:
        return SaveResult(step, layer, str(path), None, committed_time, elapsed, nbytes, True)
    try:
        apply_retention(root, layer, keep, fresh=path)
    except OSError as exc:
        log.warning("retention in %s failed (%s); older checkpoints kept", root, exc)
    return SaveResult(step, layer, str(path), None, committed_time, elapsed, nbytes)


class SyncWriter:
    """Writes in the calling process; the simple baseline and the fallback when forking is off."""

    def __init__(self, root: Path, keep: dict[str, int]) -> None:
        self.root, self.keep = root, keep
        self._unread: list[SaveResult] = []

    def submit(
        self, step: int, layer: str, payloads: dict[str, Any], extra: dict[str, Any]
    ) -> None:
        self._unread.append(
            write_and_prune(self.root, step, layer, payloads, keep=self.keep[layer], extra=extra)
        )

    def collect(self, block: bool) -> list[SaveResult]:
        """Every result not yet collected, oldest first (a synchronous save has always ended)."""
        unread, self._unread = self._unread, []
        return unread

    def close(self) -> None:
        return None


class AsyncWriter:
    """A background writer process fed through shared-memory staging buffers."""

    def __init__(self, root: Path, keep: dict[str, int]) -> None:
        self.root, self.keep = root, keep
        ctx = tmp.get_context("spawn")
        self._requests: Any = ctx.Queue()
        self._results: Any = ctx.Queue()
        self._started: Any = ctx.Event()
        self._ready = False  # the event seen set (it stays set): no lock taken per save after
        self._warned = False
        self._used = False  # anything sent to the process
        self._inline = SyncWriter(root, keep)
        self._process = ctx.Process(
            target=_writer_main,
            args=(self._requests, self._results, os.getpid(), self._started),
            name="nodeprep-checkpoint-writer",
            daemon=True,
        )
        self._process.start()
        self._staging: dict[str, StagingArea] = {}
        self._sent_generation: dict[str, int] = {}
        self._in_flight = False
        self._unread: list[SaveResult] = []

    def submit(
        self, step: int, layer: str, payloads: dict[str, Any], extra: dict[str, Any]
    ) -> None:
        """Snapshot ``payloads`` into shared memory and hand it over; blocks only for the copy.

        A previous save still in flight is waited for first (never overlapped),
        which is also what makes reusing the staging buffers safe; its result
        stays unread for the next ``collect`` (callers collect before submitting).
        While the writer process is still starting, the save is written here and now.
        """
        if not self._in_flight and not self.ready():
            self._inline.submit(step, layer, payloads, extra)
            return
        self._used = True
        if self._in_flight:
            self._unread.append(self._receive())
        tensors: list[torch.Tensor] = []
        skeleton = flatten(payloads, tensors)
        staging = self._staging.setdefault(layer, StagingArea())
        buffers = staging.copy_in(tensors)
        if self._sent_generation.get(layer) != staging.generation:
            self._requests.put(("buffers", layer, buffers))
            self._sent_generation[layer] = staging.generation
        self._requests.put(("save", layer, step, skeleton, self.keep[layer], extra, str(self.root)))
        self._in_flight = True

    def collect(self, block: bool) -> list[SaveResult]:
        """Every finished result not yet collected, oldest first; ``block`` waits for the one in
        flight, otherwise it is included only if the writer has already reported it."""
        inline = self._inline.collect(block)  # written before any save went to the process
        if self._in_flight and (block or not self._results.empty()):
            self._unread.append(self._receive())
        unread, self._unread = [*inline, *self._unread], []
        return unread

    def ready(self) -> bool:
        """Whether the writer process has started (imported torch) and takes saves."""
        if not self._ready:
            self._ready = bool(self._started.is_set())
            if not self._ready and not self._warned and not self._process.is_alive():
                self._warned = True
                log.warning(
                    "the checkpoint writer process ended before it started (exit %s); "
                    "checkpoints are written in the training process",
                    self._process.exitcode,
                )
        return self._ready

    def wait_ready(self, timeout_s: float) -> bool:
        """Block until the writer process has started, at most ``timeout_s``; whether it did."""
        self._ready = self._ready or bool(self._started.wait(timeout_s))
        return self._ready

    def close(self) -> None:
        """Stop the writer after the in-flight save (if any) has ended; a writer that was
        never sent a save is ended at once (it may still be importing torch)."""
        if not self._used and self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=60)
        if self._process.is_alive():
            self._requests.put(("stop",))
            self._process.join(timeout=600)
        self._requests.close()
        self._results.close()

    def _receive(self) -> SaveResult:
        while True:
            try:
                result: SaveResult = self._results.get(timeout=0.5)
            except queue.Empty:
                if not self._process.is_alive():
                    self._in_flight = False
                    raise CheckpointWriteError(
                        "the checkpoint writer process died before finishing a save"
                    ) from None
                continue
            self._in_flight = False
            return result


def _writer_main(requests: Any, results: Any, parent_pid: int, started: Any) -> None:
    """The writer process: die with the trainer, ignore terminal signals, write what it is sent."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        return
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
        signal.signal(signum, signal.SIG_IGN)
    torch.set_num_threads(1)
    started.set()  # torch is imported (spawn imported this module first): saves come here now
    buffers: dict[str, list[torch.Tensor]] = {}
    while True:
        message = requests.get()
        if message[0] == "stop":
            return
        if message[0] == "buffers":
            buffers[message[1]] = message[2]
            continue
        _, layer, step, skeleton, keep, extra, root = message
        payloads = unflatten(skeleton, buffers[layer])
        results.put(write_and_prune(Path(root), step, layer, payloads, keep=keep, extra=extra))
