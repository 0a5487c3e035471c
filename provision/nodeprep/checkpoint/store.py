"""Finding, verifying, loading and pruning committed checkpoints in one directory."""

from __future__ import annotations

import logging
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from nodeprep.checkpoint.durable import remove_checkpoint
from nodeprep.checkpoint.manifest import (
    CheckpointInvalidError,
    Manifest,
    check_sizes,
    parse_name,
    verify,
)
from nodeprep.checkpoint.rawfile import DATA_SUFFIX, RawFormatError, join_payload

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A checkpoint that verified and loaded, plus the newer ones that were passed over and why."""

    path: Path
    manifest: Manifest
    payloads: dict[str, Any]
    rejected: tuple[tuple[str, str], ...]
    # Seconds spent on this checkpoint: hashing every file, then loading (rejected ones apart).
    timings: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Retention:
    """What one retention pass did: directories deleted, and those it could not verify and left."""

    deleted: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()


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
    """Verify sizes and hashes, load every payload with ``weights_only=True``, check the step.

    The weights-only unpickler refuses anything but tensors and plain
    containers, so a payload crafted to run code is rejected even when its
    manifest was forged to match. Hashes prove only that the files are what the
    manifest lists, not that they belong to this step: payloads copied in from
    another checkpoint with a recomputed manifest pass them, so the step stored
    inside ``train.pt`` must equal the one the manifest and the name claim.
    """
    manifest = verify(path)
    return manifest, load_payloads(path, manifest)


def load_payloads(
    path: Path, manifest: Manifest, only: frozenset[str] | None = None
) -> dict[str, Any]:
    """The second half of ``load_verified``: call it only with a manifest ``verify`` returned
    (with the same ``only``: the payload files to load, each with its data file)."""
    payloads: dict[str, Any] = {}
    if only is not None:  # as verify(only=...) hashed them: each with its data file
        only = only | {n[: -len(".pt")] + DATA_SUFFIX for n in only if n.endswith(".pt")}
    for name in manifest.files:
        if only is not None and name not in only:
            continue
        if manifest.format_version >= 2 and name.endswith(DATA_SUFFIX):
            continue  # read with its structure file below
        try:
            payloads[name] = torch.load(path / name, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise CheckpointInvalidError(
                f"{path.name}: {name} refused by the weights-only loader ({first_line})"
            ) from exc
        if manifest.format_version >= 2:
            payloads[name] = _join(path, manifest, name, payloads[name])
    _check_step(path, manifest, payloads)
    return payloads


def _join(path: Path, manifest: Manifest, name: str, meta: Any) -> Any:
    """A format-2 payload: its structure file's contents with the data file's tensors in."""
    data_name = Path(name).with_suffix(DATA_SUFFIX).name
    entry = manifest.files.get(data_name)
    try:
        return join_payload(meta, path / data_name if entry else None, entry.size if entry else 0)
    except RawFormatError as exc:
        raise CheckpointInvalidError(f"{path.name}: {name}: {exc}") from exc


def _check_step(path: Path, manifest: Manifest, payloads: dict[str, Any]) -> None:
    """Refuse payloads whose own step differs from the claimed one (``verify`` matched name)."""
    train = payloads.get("train.pt")
    step = train.get("step") if isinstance(train, dict) else None
    if not isinstance(step, int) or isinstance(step, bool):
        raise CheckpointInvalidError(f"{path.name}: no train.pt payload with an integer step")
    if step != manifest.step:
        raise CheckpointInvalidError(
            f"{path.name}: train.pt records step {step}, "
            f"the manifest and the directory name say step {manifest.step}"
        )


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
            started = time.monotonic()
            manifest = verify(path)
            verified = time.monotonic()
            payloads = load_payloads(path, manifest)
            timings = {"verify_s": verified - started, "load_s": time.monotonic() - verified}
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
        return LoadedCheckpoint(path, manifest, payloads, tuple(rejected), timings)
    return None


def apply_retention(root: Path, layer: str, keep: int, fresh: Path | None = None) -> Retention:
    """Keep the newest ``keep`` verified checkpoints of one layer; delete older verified ones.

    Runs only after a new checkpoint of that layer committed; ``fresh`` names
    it, and it is always kept whatever sorts above it. Only directories that
    pass the size check count towards ``keep`` or are ever deleted: one that
    does not verify (a stray or half-copied directory, a damaged checkpoint)
    is not provably ours, so it is ignored, left on disk and named in a
    warning, and can never crowd out or delete a checkpoint that verifies.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    verified: list[Path] = []
    ignored: list[str] = []
    for path in committed(root, (layer,)):
        reason = _quick_check(path)
        if reason is None:
            verified.append(path)
            continue
        ignored.append(path.name)
        log.warning(
            "retention ignored %s; it does not verify, so it is neither counted nor deleted", reason
        )
    if fresh is not None and fresh in verified:
        verified.insert(0, verified.pop(verified.index(fresh)))
    deleted: list[str] = []
    for path in verified[keep:]:
        remove_checkpoint(path)
        deleted.append(path.name)
    if deleted:
        log.info("retention removed %s", ", ".join(deleted))
    return Retention(tuple(deleted), tuple(ignored))


def _quick_check(path: Path) -> str | None:
    """Why ``path`` fails the size check, or None when it passes.

    Sizes only: hashing every old checkpoint on each save would read all of them.
    """
    try:
        check_sizes(path)
    except CheckpointInvalidError as exc:
        return str(exc)
    except OSError as exc:
        return f"{path.name}: {exc}"
    return None
