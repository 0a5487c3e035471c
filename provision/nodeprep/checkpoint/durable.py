"""Durable, atomic commit of one checkpoint directory.

Order matters and is the whole point: payload files are written into a
temporary directory and fsynced, the manifest is written last and fsynced,
the temporary directory is fsynced, renamed to its final name (atomic on one
filesystem) and the parent is fsynced so the rename itself survives a power
cut. A crash at any instant leaves either the previous set of checkpoints or
the previous set plus a complete new one; leftovers are hidden names
(``.tmp-*``, ``.trash-*``) that readers never consider.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nodeprep.checkpoint.manifest import (
    MANIFEST_NAME,
    FileEntry,
    Manifest,
    checkpoint_name,
)
from nodeprep.checkpoint.rawfile import DATA_SUFFIX, DataFileWriter, split_payload
from nodeprep.data.files import atomic_write_text, fsync_dir

log = logging.getLogger(__name__)

TMP_PREFIX = ".tmp-"
TRASH_PREFIX = ".trash-"


class CheckpointWriteError(Exception):
    """A save failed; the previous checkpoints are untouched and nothing new looks valid."""


class _HashingFile:
    """A write-only file object that hashes bytes as they go, so nothing is read back."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.digest.update(view)
        self.size += view.nbytes
        written: int = self._handle.write(view)
        return written

    def flush(self) -> None:
        self._handle.flush()


def _write_structure(path: Path, obj: Any) -> FileEntry:
    with open(path, "xb", buffering=8 << 20) as raw:
        hashing = _HashingFile(raw)
        torch.save(obj, hashing)  # type: ignore[arg-type]
        raw.flush()
        os.fsync(raw.fileno())
    return FileEntry(size=hashing.size, sha256=hashing.digest.hexdigest())


def _write_payload(path: Path, obj: Any) -> dict[str, FileEntry]:
    """Format 2: large tensors' bytes into ``<stem>.bin`` (aligned, O_DIRECT where it works,
    hashed in pieces on a few threads), then the structure with the table into ``path``."""
    data_path = path.with_suffix(DATA_SUFFIX)
    writer: DataFileWriter | None = None

    def append(tensor: torch.Tensor) -> tuple[int, int]:
        nonlocal writer
        if writer is None:
            writer = DataFileWriter(data_path)
        return writer.append(tensor)

    entries: dict[str, FileEntry] = {}
    try:
        meta = split_payload(obj, append)
        if writer is not None:
            size, digest, piece = writer.finish()
            entries[data_path.name] = FileEntry(size=size, sha256=digest, chunk=piece)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    entries[path.name] = _write_structure(path, meta)
    return entries


def _write_payloads(directory: Path, payloads: Mapping[str, Any]) -> dict[str, FileEntry]:
    files: dict[str, FileEntry] = {}
    for fname, obj in payloads.items():
        if not fname.endswith(".pt"):
            raise ValueError(f"payload names end in .pt, got {fname!r}")
        files.update(_write_payload(directory / fname, obj))
    return files


def _seal(root: Path, tmp: Path, manifest: Manifest) -> Path:
    """Manifest last, fsync, atomic rename, fsync the parent: the commit itself."""
    final = root / checkpoint_name(manifest.step, manifest.layer)
    with open(tmp / MANIFEST_NAME, "x", encoding="utf-8") as handle:
        handle.write(manifest.to_json())
        handle.flush()
        os.fsync(handle.fileno())
    fsync_dir(tmp)
    if final.exists():
        remove_checkpoint(final)
    os.rename(tmp, final)
    fsync_dir(root)
    return final


def _failed(name: str, root: Path, exc: BaseException, where: str = "") -> CheckpointWriteError:
    return CheckpointWriteError(
        f"saving checkpoint {name} in {root} failed{where}: {exc}; "
        "the previous checkpoints are intact (free disk space or fix the error above)"
    )


def commit_checkpoint(
    root: Path,
    step: int,
    layer: str,
    payloads: Mapping[str, Any],
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write and commit one checkpoint; returns its final path or raises CheckpointWriteError."""
    name = checkpoint_name(step, layer)
    tmp = root / f"{TMP_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        files = _write_payloads(tmp, payloads)
        manifest = Manifest(
            step=step, layer=layer, created=time.time(), files=files, extra=extra or {}
        )
        return _seal(root, tmp, manifest)
    except Exception as exc:  # whatever failed (a payload torch.save cannot write too)
        shutil.rmtree(tmp, ignore_errors=True)
        raise _failed(name, root, exc) from exc


@dataclass(frozen=True)
class Part:
    """One rank's share of a sharded save. Rank 0 chose ``token`` for this save and told every
    rank (it names the temporary directory); rank 0 waits for every part and commits."""

    rank: int
    world_size: int
    token: str
    timeout_s: float


def part_directory(root: Path, step: int, layer: str, token: str) -> Path:
    """The temporary directory every rank of one sharded save writes into."""
    return root / f"{TMP_PREFIX}{checkpoint_name(step, layer)}-{token}"


def commit_part(
    root: Path,
    step: int,
    layer: str,
    payloads: Mapping[str, Any],
    part: Part,
    extra: dict[str, Any],
) -> tuple[Path, int]:
    """Write this rank's files of a sharded checkpoint; rank 0 also commits the whole.

    Each rank writes its payload files into the shared temporary directory, then
    ``part-RANK.json`` (names, sizes, sha256; written atomically) or, when its write failed,
    ``part-RANK.failed`` with the reason. Rank 0 waits for every rank's part, merges them into
    one manifest and commits as ``commit_checkpoint`` does; a failed or missing part removes
    the temporary directory and fails the save naming the rank. Returns (the checkpoint's
    final path, bytes this rank wrote); on ranks other than 0 the path is committed only once
    rank 0 says so.
    """
    name = checkpoint_name(step, layer)
    tmp = part_directory(root, step, layer, part.token)
    marker = tmp / f"part-{part.rank:05d}"
    try:
        if part.rank == 0:
            tmp.mkdir(parents=True, exist_ok=True)  # made before the save began, normally
        elif not tmp.is_dir():
            # Rank 0 gave the save up (a failed or late part) and removed the directory:
            # writing now would leave shards nothing removes.
            raise OSError(f"{tmp.name} is gone: rank 0 gave this save up")
        files = _write_payloads(tmp, payloads)
        body = {n: {"size": e.size, "sha256": e.sha256, "chunk": e.chunk} for n, e in files.items()}
        atomic_write_text(marker.with_suffix(".json"), json.dumps(body))
    except Exception as exc:  # every failure must reach rank 0 as a .failed part
        error = _failed(name, root, exc, f" on rank {part.rank}")
        with contextlib.suppress(OSError):
            atomic_write_text(marker.with_suffix(".failed"), str(error))
        if part.rank == 0:
            _give_up(tmp)
        raise error from exc
    mine = sum(entry.size for entry in files.values())
    if part.rank != 0:
        return root / name, mine
    try:
        merged = _gather_parts(tmp, part, name)
        for index in range(part.world_size):
            (tmp / f"part-{index:05d}.json").unlink()
        manifest = Manifest(step=step, layer=layer, created=time.time(), files=merged, extra=extra)
        return _seal(root, tmp, manifest), mine
    except CheckpointWriteError:
        _give_up(tmp)
        raise
    except Exception as exc:  # never out of the writer process as anything but a failed save
        _give_up(tmp)
        raise _failed(name, root, exc) from exc


def _give_up(tmp: Path) -> None:
    """Remove a sharded save's directory so that no rank writes into it again: renamed away
    first (atomic), so a late rank finds the name gone instead of racing the removal."""
    trash = tmp.with_name(f"{TRASH_PREFIX}{tmp.name[len(TMP_PREFIX) :]}")
    try:
        os.rename(tmp, trash)
    except OSError:
        trash = tmp
    shutil.rmtree(trash, ignore_errors=True)


def _gather_parts(tmp: Path, part: Part, name: str) -> dict[str, FileEntry]:
    """Every rank's file entries, once all have written; raises for a failed or late rank."""
    deadline = time.monotonic() + part.timeout_s
    waiting = set(range(part.world_size))
    merged: dict[str, FileEntry] = {}
    while True:
        for index in sorted(waiting):
            failed = tmp / f"part-{index:05d}.failed"
            if failed.exists():
                raise CheckpointWriteError(failed.read_text(encoding="utf-8", errors="replace"))
            done = tmp / f"part-{index:05d}.json"
            if done.exists():
                for fname, entry in json.loads(done.read_text(encoding="utf-8")).items():
                    if fname in merged:
                        raise ValueError(f"rank {index} wrote {fname}, which another rank wrote")
                    merged[fname] = FileEntry(
                        int(entry["size"]), str(entry["sha256"]), int(entry.get("chunk", 0))
                    )
                waiting.discard(index)
        if not waiting:
            return merged
        if time.monotonic() > deadline:
            late = ", ".join(str(r) for r in sorted(waiting))
            raise CheckpointWriteError(
                f"saving checkpoint {name}: rank(s) {late} did not write "
                f"their part within {part.timeout_s:.0f} s; the previous checkpoints are intact"
            )
        time.sleep(0.02)


def remove_checkpoint(path: Path) -> None:
    """Hide a checkpoint with one atomic rename, then delete it; a crash mid-delete is harmless."""
    trash = path.parent / f"{TRASH_PREFIX}{path.name}-{uuid.uuid4().hex[:8]}"
    os.rename(path, trash)
    fsync_dir(path.parent)
    shutil.rmtree(trash, ignore_errors=True)


def sweep_leftovers(root: Path) -> list[str]:
    """Delete temporary and trash directories a crashed writer left; returns their names.

    Call only when no writer is running on ``root`` (at start-up, before the
    first save).
    """
    removed: list[str] = []
    if not root.is_dir():
        return removed
    for entry in root.iterdir():
        if entry.name.startswith((TMP_PREFIX, TRASH_PREFIX)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    if removed:
        log.info("removed %d leftover partial checkpoint(s) in %s", len(removed), root)
    return removed
