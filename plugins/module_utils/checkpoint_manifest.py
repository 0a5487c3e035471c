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
from typing import Any

FORMAT_VERSION = 2  # what is written: large tensors' raw bytes in .bin files (rawfile.py)
READABLE_VERSIONS = (1, 2)  # 1: every payload one torch.save file
MANIFEST_NAME = "manifest.json"
LAYERS = ("light", "full")
_NAME_RE = re.compile(r"^ckpt-(\d{10})-(light|full)$")
_HASH_CHUNK = 4 << 20


class CheckpointInvalidError(Exception):
    """A checkpoint directory failed verification; the message says which check failed."""


@dataclass(frozen=True)
class FileEntry:
    """One payload file as the writer saw it."""

    size: int
    sha256: str


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
            "files": {n: {"size": e.size, "sha256": e.sha256} for n, e in self.files.items()},
            "extra": self.extra,
        }
        return json.dumps(body, sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        files = {
            str(name): FileEntry(size=int(e["size"]), sha256=str(e["sha256"]))
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


def verify(directory: Path) -> Manifest:
    """Check the manifest, then every file's presence, size and sha256; raise on the first miss.

    Sizes are checked for all files before any hashing so a truncated file is
    reported without reading gigabytes first.
    """
    manifest = check_sizes(directory)
    names = list(manifest.files)
    # Files are hashed side by side (hashlib releases the GIL): a resume waits for this.
    workers = max(1, min(len(names), os.cpu_count() or 1, 8))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        digests = list(pool.map(lambda name: sha256_file(directory / name), names))
    for name, digest in zip(names, digests):
        if digest != manifest.files[name].sha256:
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
        size = path.stat().st_size
        if size != entry.size:
            raise CheckpointInvalidError(
                f"{directory.name}: {name} is {size} bytes, manifest says {entry.size}"
            )
    return manifest
