"""Finding, verifying, loading and pruning committed checkpoints in one directory."""

from __future__ import annotations

import logging
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nodeprep.checkpoint.durable import remove_checkpoint
from nodeprep.checkpoint.manifest import (
    CheckpointInvalidError,
    Manifest,
    parse_name,
    verify,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A checkpoint that verified and loaded, plus the newer ones that were passed over and why."""

    path: Path
    manifest: Manifest
    payloads: dict[str, Any]
    rejected: tuple[tuple[str, str], ...]


def committed(root: Path, layers: tuple[str, ...] = ("light", "full")) -> list[Path]:
    """Committed checkpoint directories of the given layers, newest step first."""
    if not root.is_dir():
        return []
    found: list[tuple[int, str, Path]] = []
    for entry in root.iterdir():
        parsed = parse_name(entry.name)
        if parsed and parsed[1] in layers and entry.is_dir():
            found.append((parsed[0], parsed[1], entry))
    # Equal steps: the full one first, it holds strictly more.
    found.sort(key=lambda item: (item[0], item[1] == "full"), reverse=True)
    return [path for _, _, path in found]


def load_verified(path: Path) -> tuple[Manifest, dict[str, Any]]:
    """Verify sizes and hashes, then load every payload with ``weights_only=True``.

    The weights-only unpickler refuses anything but tensors and plain
    containers, so a payload crafted to run code is rejected even when its
    manifest was forged to match.
    """
    manifest = verify(path)
    payloads: dict[str, Any] = {}
    for name in manifest.files:
        try:
            payloads[name] = torch.load(path / name, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise CheckpointInvalidError(
                f"{path.name}: {name} refused by the weights-only loader ({first_line})"
            ) from exc
    return manifest, payloads


def load_latest(
    root: Path, layers: tuple[str, ...] = ("full",), only: str | None = None
) -> LoadedCheckpoint | None:
    """Load the newest checkpoint that verifies, falling back to older ones and saying why.

    ``only`` restricts the search to one directory name (used by ranks that
    must load exactly what rank 0 chose).
    """
    rejected: list[tuple[str, str]] = []
    for path in committed(root, layers):
        if only is not None and path.name != only:
            continue
        try:
            manifest, payloads = load_verified(path)
        except CheckpointInvalidError as exc:
            log.warning("checkpoint rejected: %s; trying an older one", exc)
            rejected.append((path.name, str(exc)))
            continue
        if rejected:
            log.warning(
                "resuming from %s (step %d) because newer checkpoint(s) failed: %s",
                path.name,
                manifest.step,
                "; ".join(reason for _, reason in rejected),
            )
        return LoadedCheckpoint(path, manifest, payloads, tuple(rejected))
    return None


def apply_retention(root: Path, layer: str, keep: int) -> list[str]:
    """Delete the oldest checkpoints of one layer beyond ``keep``; returns what was deleted.

    Runs only after a new checkpoint of that layer committed, so the newest one
    (which was just verified by its own writer) is always among those kept.
    Older checkpoints that fail verification do not count towards ``keep``
    and are deleted, so corruption never crowds out good copies.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    paths = committed(root, (layer,))
    kept = 0
    deleted: list[str] = []
    for index, path in enumerate(paths):
        if kept < keep and (index == 0 or _quick_valid(path)):
            kept += 1
            continue
        remove_checkpoint(path)
        deleted.append(path.name)
    if deleted:
        log.info("retention removed %s", ", ".join(deleted))
    return deleted


def _quick_valid(path: Path) -> bool:
    """Manifest and sizes only: hashing every old checkpoint on each save would cost a full read."""
    try:
        manifest = Manifest.from_json((path / "manifest.json").read_text(encoding="utf-8"))
        return all(
            (path / n).is_file() and (path / n).stat().st_size == e.size
            for n, e in manifest.files.items()
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False
