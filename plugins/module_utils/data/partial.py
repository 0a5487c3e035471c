"""An unfinished download on disk: ``DEST.part`` and the sidecar ``DEST.part.json``.

Resuming appends new bytes to old ones, which is only sound when both halves
came from the same version of the file. The sidecar records which version
the part holds (the server's ETag, else its Last-Modified, and the total
size) together with the URL and the expected sha256, so that a later run,
even in another process, can ask the server for the rest of *that* version
(``If-Range``) and notice when it gets something else. A part without a
sidecar that matches is of unknown origin and is discarded, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .files import atomic_write_text, hash_file, remove_quietly

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Validator:
    """What identifies one version of the file on the server."""

    etag: str | None
    last_modified: str | None
    total: int | None

    def if_range(self) -> str | None:
        """The If-Range value: a strong ETag, else Last-Modified (weak ETags are not allowed)."""
        if self.etag and not self.etag.startswith("W/"):
            return self.etag
        return self.last_modified

    def change_to(self, served: Validator) -> str | None:
        """How ``served`` shows a different version than this one, or None when it does not.

        A header missing on one side is no evidence either way; ETags, when
        both have one, decide over Last-Modified.
        """
        if self.etag and served.etag and self.etag != served.etag:
            return f"its ETag changed from {self.etag} to {served.etag}"
        if self.total is not None and served.total is not None and self.total != served.total:
            return f"its size changed from {self.total} to {served.total} bytes"
        before, after = self.last_modified, served.last_modified
        if not (self.etag and served.etag) and before and after and before != after:
            return f"its Last-Modified changed from {before} to {after}"
        return None


@dataclass
class Resumed:
    """What a run starts from: the part's version (None: start fresh), length and hash so far."""

    validator: Validator | None
    offset: int
    digest: hashlib._Hash


class PartFile:
    """The ``.part`` file of one destination and its sidecar."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.path = dest.with_name(dest.name + ".part")
        self.sidecar = dest.with_name(dest.name + ".part.json")

    def load(self, url: str, sha256: str) -> Resumed:
        """The part left by an earlier attempt, hashed once, or a fresh start."""
        recorded = self._read_sidecar()
        if not self.path.is_file():
            remove_quietly(self.sidecar)
            return Resumed(None, 0, hashlib.sha256())
        if recorded is None or recorded.get("url") != url or recorded.get("sha256") != sha256:
            log.info("%s is not known to be a part of %s; discarding it", self.path, url)
            self.discard()
            return Resumed(None, 0, hashlib.sha256())
        validator = Validator(
            recorded.get("etag"), recorded.get("last_modified"), recorded.get("total")
        )
        digest = hashlib.sha256()
        offset, _ = hash_file(self.path, digest)
        if validator.total is not None and offset > validator.total:
            log.info("%s is longer than the file it is part of; discarding it", self.path)
            self.discard()
            return Resumed(None, 0, hashlib.sha256())
        return Resumed(validator, offset, digest)

    def start(self, url: str, sha256: str, validator: Validator) -> None:
        """Empty the part and record the version its bytes will come from, before any byte."""
        self.path.write_bytes(b"")
        record = {"url": url, "sha256": sha256, **asdict(validator)}
        atomic_write_text(self.sidecar, json.dumps(record, sort_keys=True) + "\n")

    def discard(self) -> None:
        """Remove the part, then its sidecar: a part never lacks its sidecar, even after a crash."""
        remove_quietly(self.path)
        remove_quietly(self.sidecar)

    def _read_sidecar(self) -> dict[str, Any] | None:
        try:
            record = json.loads(self.sidecar.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict):
            return None
        if not all(isinstance(record.get(key), str) for key in ("url", "sha256")):
            return None
        optional = {"etag": str, "last_modified": str, "total": int}
        for key, kind in optional.items():
            if record.get(key) is not None and not isinstance(record[key], kind):
                return None
        return record
