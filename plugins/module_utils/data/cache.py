"""A cache of preprocessed items: written atomically, read without pickle, never trusted blindly.

Preprocessing (tokenising, decoding, resizing) is paid once per item and kept on local disk,
so a restarted run, or the next run on the same node, starts at once. An entry is one file:

    MAGIC (8 bytes) | header length (4 bytes, big-endian) | header (JSON) | payload

The header holds the entry's namespace and key, the payload's size and sha256, and the
caller's metadata (JSON only). Reading checks all of it: a torn entry (a crash mid-write on a
filesystem that lost the rename's order), a foreign one (another namespace or key at that
name, a file from another tool) or a damaged one is dropped and computed again, never
returned. Nothing is unpickled: the payload is bytes the caller decodes (``tensor_payload``
and ``tensor_from_payload`` in the trainer do it for tensors).

The namespace names everything the payload depends on besides the key (the preprocessing
code's version, its parameters): change it and every entry is computed afresh. Writes go to
a temporary file in the same directory, fsync, rename, fsync of the directory; concurrent
writers of one key (DataLoader workers) each write whole files and the last rename wins.

Standard library and Python 3.8 only, like the rest of this package.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import struct
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Tuple

from .files import fsync_dir

MAGIC = b"NPCACHE1"
_LENGTH = struct.Struct(">I")
_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_MAX_HEADER = 1 << 20
log = logging.getLogger(__name__)

Computed = Tuple[bytes, Any]  # payload, JSON-able metadata (a runtime alias: Python 3.8)


@dataclass
class CacheStats:
    """What this cache object did: hits, misses (absent), and entries it refused and redid."""

    hits: int = 0
    misses: int = 0
    refused: int = 0
    reasons: list[str] = field(default_factory=list)


class PreprocessCache:
    """Entries under ``root/namespace/``; see the module docstring for the guarantees."""

    def __init__(self, root: str | os.PathLike[str], namespace: str) -> None:
        if not _NAMESPACE.match(namespace):
            raise ValueError(
                f"a cache namespace is 1-128 letters, digits, '.', '_' or '-', not {namespace!r}"
            )
        self.namespace = namespace
        self.directory = Path(root) / namespace
        self.stats = CacheStats()

    def path(self, key: str) -> Path:
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
        return self.directory / digest[:2] / f"{digest}.entry"

    def get(self, key: str) -> Computed | None:
        """The payload and metadata stored for KEY, or None (absent, or refused and removed)."""
        path = self.path(key)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            self.stats.misses += 1
            return None
        found = self._parse(blob, key)
        if isinstance(found, str):
            self.stats.refused += 1
            self.stats.reasons.append(found)
            log.warning("cache entry %s refused (%s); computing it again", path, found)
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        self.stats.hits += 1
        return found

    def put(self, key: str, payload: bytes, meta: Any = None) -> Path:
        """Store PAYLOAD and META for KEY atomically and durably; returns the entry's path."""
        header = json.dumps(
            {"namespace": self.namespace, "key": key, "size": len(payload),
             "sha256": hashlib.sha256(payload).hexdigest(), "meta": meta},
            sort_keys=True, separators=(",", ":"),
        ).encode("utf-8")  # fmt: skip
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            with open(temporary, "wb") as handle:
                handle.write(MAGIC + _LENGTH.pack(len(header)) + header)
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise
        fsync_dir(path.parent)
        return path

    def get_or_compute(self, key: str, compute: Callable[[], Computed]) -> Computed:
        """The stored entry for KEY, else COMPUTE()'s result, stored before it is returned."""
        found = self.get(key)
        if found is not None:
            return found
        payload, meta = compute()
        self.put(key, payload, meta)
        return payload, meta

    def _parse(self, blob: bytes, key: str) -> Computed | str:
        """The entry's payload and metadata, or why it is refused."""
        try:
            header, payload = _split(blob)
        except _Refused as refused:
            return str(refused)
        if header.get("namespace") != self.namespace or header.get("key") != key:
            return f"it belongs to {header.get('namespace')!r}/{header.get('key')!r}"
        if len(payload) != header.get("size"):
            return f"torn: {len(payload)} payload bytes of {header.get('size')}"
        if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
            return "its payload does not match its sha256"
        return payload, header.get("meta")


class _Refused(Exception):
    """Why an entry's bytes cannot be an entry."""


def _split(blob: bytes) -> tuple[dict[str, Any], bytes]:
    """An entry's header and payload, or _Refused."""
    start = len(MAGIC) + _LENGTH.size
    if len(blob) < start or not blob.startswith(MAGIC):
        raise _Refused("not a nodeprep cache entry, or torn before its header")
    (length,) = _LENGTH.unpack_from(blob, len(MAGIC))
    if length > _MAX_HEADER or len(blob) < start + length:
        raise _Refused("torn inside its header")
    try:
        header = json.loads(blob[start : start + length].decode("utf-8"))
    except ValueError:
        raise _Refused("its header is not valid JSON") from None
    if not isinstance(header, dict):
        raise _Refused("its header is not an object")
    return header, blob[start + length :]
