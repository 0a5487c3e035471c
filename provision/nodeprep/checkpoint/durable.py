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

import hashlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Mapping
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
from nodeprep.data.files import fsync_dir

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
    hashed on a second thread), then the structure with the table into ``path``."""
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
            size, digest = writer.finish()
            entries[data_path.name] = FileEntry(size=size, sha256=digest)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    entries[path.name] = _write_structure(path, meta)
    return entries


def commit_checkpoint(
    root: Path,
    step: int,
    layer: str,
    payloads: Mapping[str, Any],
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write and commit one checkpoint; returns its final path or raises CheckpointWriteError."""
    name = checkpoint_name(step, layer)
    final = root / name
    tmp = root / f"{TMP_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        files: dict[str, FileEntry] = {}
        for fname, obj in payloads.items():
            if not fname.endswith(".pt"):
                raise ValueError(f"payload names end in .pt, got {fname!r}")
            files.update(_write_payload(tmp / fname, obj))
        manifest = Manifest(
            step=step, layer=layer, created=time.time(), files=files, extra=extra or {}
        )
        with open(tmp / MANIFEST_NAME, "x", encoding="utf-8") as handle:
            handle.write(manifest.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        fsync_dir(tmp)
        if final.exists():
            remove_checkpoint(final)
        os.rename(tmp, final)
        fsync_dir(root)
    except (OSError, RuntimeError, ValueError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointWriteError(
            f"saving checkpoint {name} in {root} failed: {exc}; "
            "the previous checkpoints are intact (free disk space or fix the error above)"
        ) from exc
    return final


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
