"""Resumable, checksummed download of one data set file onto a node.

``download`` is built for flaky networks and large files: bytes land in
``DEST.part`` and survive any failure; every retry (and every later run)
continues from them with a Range request guarded by If-Range, so that two
versions of the file are never spliced together; the sha256 is computed
while writing, and ``DEST`` appears, by one atomic rename, only once the
whole file matches. A second run over a good ``DEST`` does nothing.

Standard library only: this module also runs as Ansible module_utils.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from .errors import DownloadError
from .fetch import check_url
from .files import hash_file
from .retry import RetryPolicy
from .transfer import Transfer

log = logging.getLogger(__name__)

_SHA256 = re.compile(r"[0-9a-f]{64}")
DEFAULT_POLICY = RetryPolicy()
"""The documented defaults of RetryPolicy (frozen, so one shared instance is safe)."""

# typing's spellings: this alias is evaluated at import, and nodes may run Python 3.8.
ProgressCallback = Callable[[int, Optional[int]], None]
"""Called as bytes arrive with (bytes of the file on disk so far, total size or None)."""


@dataclass(frozen=True)
class DownloadResult:
    """What one ``download`` call did.

    Attributes:
        path: the verified destination file.
        bytes_transferred: body bytes received in this call, including bytes
            later thrown away by a restart (0 when ``path`` was already good).
        resumes: requests that continued from a non-zero offset.
        restarts: times the bytes so far were thrown away because the server's
            file changed or the server ignored a Range request.
        attempts: HTTP requests made (redirect hops not counted).
        seconds: wall-clock duration of the call.
    """

    path: Path
    bytes_transferred: int
    resumes: int
    restarts: int
    attempts: int
    seconds: float


def download(
    url: str,
    dest: str | os.PathLike[str],
    sha256: str,
    *,
    size: int | None = None,
    policy: RetryPolicy = DEFAULT_POLICY,
    on_progress: ProgressCallback | None = None,
) -> DownloadResult:
    """Download ``url`` to ``dest`` and prove it is the file whose sha256 is ``sha256``.

    Raises DownloadError, with one sentence naming the URL or file, for bad
    input (before any request), a status that retrying will not change,
    a checksum or size mismatch (nothing is left behind) or an exhausted
    retry budget (the ``.part`` is kept, so running again resumes).
    """
    started = time.monotonic()
    target = Path(dest)
    _check_inputs(url, target, sha256, size)
    if _already_there(target, sha256, size):
        log.info("%s already matches sha256 %s; nothing to download", target, sha256)
        return DownloadResult(target, 0, 0, 0, 0, time.monotonic() - started)
    transfer = Transfer(url, target, sha256, size, policy, on_progress, started)
    transfer.run()
    return DownloadResult(
        path=target,
        bytes_transferred=transfer.transferred,
        resumes=transfer.resumes,
        restarts=transfer.restarts,
        attempts=transfer.attempts,
        seconds=time.monotonic() - started,
    )


def _check_inputs(url: str, dest: Path, sha256: str, size: int | None) -> None:
    """Refuse bad input before the first request, so a typo costs nothing."""
    if not isinstance(sha256, str) or _SHA256.fullmatch(sha256) is None:
        raise DownloadError(
            f"the expected sha256 of {dest} must be 64 lowercase hexadecimal digits, not {sha256!r}"
        )
    if size is not None and size < 0:
        raise DownloadError(f"the expected size of {dest} must not be negative, not {size}")
    check_url(url)
    if not dest.parent.is_dir():
        raise DownloadError(
            f"the directory {dest.parent} for {dest.name} does not exist; create it"
        )


def _already_there(dest: Path, sha256: str, size: int | None) -> bool:
    """True when ``dest`` is already the expected file (read once, only if its size fits)."""
    if not dest.is_file():
        return False
    if size is not None and dest.stat().st_size != size:
        log.info("%s has the wrong size; downloading it again", dest)
        return False
    _, actual = hash_file(dest)
    if actual != sha256:
        log.info("%s has sha256 %s, not %s; downloading it again", dest, actual, sha256)
        return False
    return True
