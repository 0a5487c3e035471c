"""The on-disk checkpoint format: one directory, a manifest written last, names that sort.

A checkpoint is ``<root>/ckpt-<step>-<layer>/`` holding payload files and
``manifest.json``. The manifest names every payload file with its size and
sha256, so a reader can prove the directory is exactly what the writer
committed before anything is unpickled. A directory without a manifest that
parses and matches is not a checkpoint.

One file, two names: ``nodeprep.checkpoint.manifest`` (a symlink to this file) is what
the checkpoint core resumes with, and the collection's module_utils
``checkpoint_manifest`` is what ``nodeprep verify`` judges with on the nodes, so the two
can never disagree. Standard library and Python 3.8 only, for that second use.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

FORMAT_VERSION = 2  # what is written: large tensors' raw bytes in .bin files (rawfile.py)
READABLE_VERSIONS = (1, 2)  # 1: every payload one torch.save file
MANIFEST_NAME = "manifest.json"
LAYERS = ("light", "full")
_NAME_RE = re.compile(r"^ckpt-(\d{10})-(light|full)$")
_HASH_CHUNK = 4 << 20
PIECE = 64 << 20  # what the writer hashes data files in (FileEntry.chunk)
MIN_PIECE = 1 << 20  # a manifest claiming smaller pieces is refused (millions of hash jobs)


class CheckpointInvalidError(Exception):
    """A checkpoint directory failed verification; the message says which check failed."""


@dataclass(frozen=True)
class FileEntry:
    """One payload file as the writer saw it.

    With ``chunk`` (format 2 data files), ``sha256`` is the sha256 of the concatenated
    sha256 digests of the file's ``chunk``-byte pieces (the last one shorter): every byte is
    still covered, and a reader can hash the pieces side by side, on as many cores as it has.
    """

    size: int
    sha256: str
    chunk: int = 0


@dataclass(frozen=True)
class Manifest:
    """What a committed checkpoint claims about itself."""

    step: int
    layer: str
    created: float
    files: dict[str, FileEntry]
    format_version: int = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        body = {
            "format_version": self.format_version,
            "step": self.step,
            "layer": self.layer,
            "created": self.created,
            "files": {n: _entry_json(e) for n, e in self.files.items()},
            "extra": self.extra,
        }
        return json.dumps(body, sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        files = {
            str(name): FileEntry(
                size=int(e["size"]), sha256=str(e["sha256"]), chunk=int(e.get("chunk", 0))
            )
            for name, e in data["files"].items()
        }
        return cls(
            step=int(data["step"]),
            layer=str(data["layer"]),
            created=float(data["created"]),
            files=files,
            format_version=int(data["format_version"]),
            extra=dict(data.get("extra", {})),
        )


def _entry_json(entry: FileEntry) -> dict[str, Any]:
    body: dict[str, Any] = {"size": entry.size, "sha256": entry.sha256}
    if entry.chunk:
        body["chunk"] = entry.chunk
    return body


def checkpoint_name(step: int, layer: str) -> str:
    """The directory name for a checkpoint; zero-padded so names sort by step."""
    if layer not in LAYERS:
        raise ValueError(f"unknown checkpoint layer {layer!r}; use one of {', '.join(LAYERS)}")
    return f"ckpt-{step:010d}-{layer}"


def parse_name(name: str) -> tuple[int, str] | None:
    """(step, layer) for a committed checkpoint name, None for anything else."""
    match = _NAME_RE.match(name)
    return (int(match.group(1)), match.group(2)) if match else None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_piece(path: Path, offset: int, length: int) -> bytes:
    """The sha256 digest of ``length`` bytes of ``path`` from ``offset``."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        handle.seek(offset)
        while length > 0:
            block = handle.read(min(_HASH_CHUNK, length))
            if not block:
                break
            digest.update(block)
            length -= len(block)
    return digest.digest()


def _usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, a container's cpuset), not the host's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def tree_sha256(piece_digests: list[bytes]) -> str:
    """A chunked entry's ``sha256``: over its pieces' digests, in order."""
    return hashlib.sha256(b"".join(piece_digests)).hexdigest()


def verify(directory: Path, only: Iterable[str] | None = None) -> Manifest:
    """Check the manifest, then every file's presence, size and sha256; raise on the first miss.

    Sizes are checked for all files before any hashing so a truncated file is
    reported without reading gigabytes first. ``only`` limits the hashing to those names
    (each rank of a sharded checkpoint hashes the files it loads); sizes are still checked
    for all. Whole files and the pieces of chunked ones are hashed side by side, one thread
    per core (hashlib releases the GIL): a resume waits for this.
    """
    manifest = check_sizes(directory)
    wanted = None if only is None else set(only)
    if wanted is not None:  # a structure file's data file is hashed with it, always
        wanted |= {n[: -len(".pt")] + ".bin" for n in wanted if n.endswith(".pt")}
    names = [n for n in manifest.files if wanted is None or n in wanted]
    jobs: list[tuple[str, int, int]] = []  # (name, offset, length); length -1: the whole file
    for name in names:
        entry = manifest.files[name]
        if entry.chunk:
            jobs += [(name, o, entry.chunk) for o in range(0, entry.size, entry.chunk)]
        else:
            jobs.append((name, 0, -1))

    def run(job: tuple[str, int, int]) -> Any:
        name, offset, length = job
        if length < 0:
            return sha256_file(directory / name)
        return sha256_piece(directory / name, offset, length)

    workers = max(1, min(len(jobs), _usable_cpus(), 32))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(run, jobs))
    pieces: dict[str, list[bytes]] = {}
    whole: dict[str, str] = {}
    for (name, _, length), result in zip(jobs, results):
        if length < 0:
            whole[name] = result
        else:
            pieces.setdefault(name, []).append(result)
    for name in names:
        entry = manifest.files[name]
        digest = tree_sha256(pieces.get(name, [])) if entry.chunk else whole[name]
        if digest != entry.sha256:
            raise CheckpointInvalidError(f"{directory.name}: {name} sha256 does not match manifest")
    return manifest


def check_sizes(directory: Path) -> Manifest:
    """Every check of ``verify`` except hashing: the manifest, the name, each file and its size.

    Cheap enough to run on every checkpoint at each save (retention does), and
    the same rules as the full check, so the two never disagree on anything but
    the bytes themselves.
    """
    manifest_path = directory / MANIFEST_NAME
    try:
        manifest = Manifest.from_json(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise CheckpointInvalidError(f"{directory.name}: no {MANIFEST_NAME}") from exc
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointInvalidError(f"{directory.name}: unreadable manifest ({exc})") from exc
    if manifest.format_version not in READABLE_VERSIONS:
        raise CheckpointInvalidError(
            f"{directory.name}: format version {manifest.format_version}, "
            f"this reader understands {' and '.join(map(str, READABLE_VERSIONS))}"
        )
    if parse_name(directory.name) != (manifest.step, manifest.layer):
        raise CheckpointInvalidError(f"{directory.name}: manifest step/layer do not match name")
    for name, entry in manifest.files.items():
        path = directory / name
        if "/" in name or name == MANIFEST_NAME or not path.is_file():
            raise CheckpointInvalidError(f"{directory.name}: file {name} is missing")
        if entry.chunk and entry.chunk < MIN_PIECE:
            raise CheckpointInvalidError(
                f"{directory.name}: {name} has pieces of {entry.chunk} bytes (at least "
                f"{MIN_PIECE} expected)"
            )
        size = path.stat().st_size
        if size != entry.size:
            raise CheckpointInvalidError(
                f"{directory.name}: {name} is {size} bytes, manifest says {entry.size}"
            )
    return manifest
