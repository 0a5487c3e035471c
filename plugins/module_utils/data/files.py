"""Local file primitives that staging and manifests share: streaming sha256, durable writes.

Standard library only: this package also runs as Ansible module_utils on nodes
that have nothing but python3. Both callers need the same two guarantees, so
they live here once: a file is hashed by reading it exactly once, in bounded
memory, and a small file (a manifest, a download's sidecar) is replaced
atomically and durably, so a reader sees the old or the new content and
never a torn one, even after a power cut.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

HASH_CHUNK = 1 << 20


def hash_file(path: Path, digest: hashlib._Hash | None = None) -> tuple[int, str]:
    """(size, sha256 hex) of ``path`` read once; feeds ``digest`` when given (to continue it)."""
    running = digest if digest is not None else hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            running.update(chunk)
            size += len(chunk)
    return size, running.hexdigest()


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in ``path`` survive a power cut (the entry lives in the dir)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Flush a file's data to disk before it is renamed into place."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(path: Path) -> Path:
    """A hidden, unique sibling of ``path``: same filesystem, so the final rename is atomic."""
    return path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:12]}"


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: temp file, fsync, rename, fsync of the directory."""
    tmp = temp_name(path)
    try:
        with open(tmp, "x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    fsync_dir(path.parent)


def remove_quietly(path: Path) -> bool:
    """Delete ``path`` if it exists; True when something was deleted."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
