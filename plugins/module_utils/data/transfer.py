"""The state machine behind ``download``: attempts, resumes, restarts, the final commit.

One ``Transfer`` per call. It holds the bytes-so-far as three facts that are
kept equal at every instant: the length of ``DEST.part``, ``offset``, and the
running sha256 ``digest`` (a byte is hashed only after it is written). That
is what lets a retry continue without reading the part again, and the final
comparison cost nothing but a hexdigest.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from .errors import DownloadError, TransientError
from .fetch import Exchange, open_get, parse_content_range, triage
from .files import fsync_dir, fsync_file, remove_quietly
from .partial import PartFile, Validator
from .retry import RetryPolicy

log = logging.getLogger("nodeprep.data.download")

READ_CHUNK = 1 << 20


class Transfer:
    """Downloads one URL into ``DEST.part`` within a retry budget, then commits it to ``DEST``."""

    def __init__(
        self,
        url: str,
        dest: Path,
        sha256: str,
        size: int | None,
        policy: RetryPolicy,
        on_progress: Callable[[int, int | None], None] | None,
        started: float,
    ) -> None:
        self.url, self.dest, self.sha256, self.size = url, dest, sha256, size
        self.policy, self.on_progress = policy, on_progress
        self.deadline = started + policy.max_seconds
        self.part = PartFile(dest)
        self.validator: Validator | None = None
        self.offset = 0
        self.digest = hashlib.sha256()
        self.transferred = self.resumes = self.restarts = self.attempts = 0
        # Attempts in a row without a new byte: what the attempt budget and backoff count.
        self.fruitless = 0
        self.last_failure = "no attempt was made"

    def run(self) -> None:
        """Fetch until the part is whole, then verify and commit it; raises DownloadError."""
        try:
            resumed = self.part.load(self.url, self.sha256)
            self.validator, self.offset = resumed.validator, resumed.offset
            self.digest = resumed.digest
            done = self._part_is_whole()
            while not done:
                self._check_budget()
                self.attempts += 1
                received_before = self.transferred
                try:
                    done = self._attempt()
                except TransientError as exc:
                    self.last_failure = exc.reason
                    self.fruitless = 1 if self.transferred > received_before else self.fruitless + 1
                    self._wait_before_retry(exc)
                else:
                    self.fruitless += 1
            self._commit()
        except OSError as exc:
            raise DownloadError(
                f"writing {self.part.path} for {self.url} failed: {exc}; "
                "free disk space or fix the error, then run again to resume"
            ) from exc

    def _part_is_whole(self) -> bool:
        total = self.validator.total if self.validator is not None else None
        return total is not None and self.offset == total

    def _attempt(self) -> bool:
        """One request; True when the body ended the file, False when a new request is due."""
        exchange = open_get(self.url, self._request_headers(), self._timeout())
        try:
            triage(exchange, self.url)
            if not self._accept(exchange):
                return False
            self._receive(exchange.response)
        finally:
            exchange.close()
        return True

    def _request_headers(self) -> dict[str, str]:
        headers = {"Connection": "close", "Accept-Encoding": "identity"}
        if self.offset > 0 and self.validator is not None:
            headers["Range"] = f"bytes={self.offset}-"
            if_range = self.validator.if_range()
            if if_range is not None:
                headers["If-Range"] = if_range
        return headers

    def _timeout(self) -> float:
        return max(min(self.policy.timeout_seconds, self.deadline - time.monotonic()), 0.1)

    def _accept(self, exchange: Exchange) -> bool:
        """Decide what the answer's body is; True to append it to the part."""
        response = exchange.response
        served = _served_version(response)
        if response.status == 416:
            self._restart(f"the server has no bytes from offset {self.offset} on (HTTP 416)")
            return False
        if response.status == 200:
            if self.offset > 0:
                change = self.validator.change_to(served) if self.validator else None
                self._restart(change or "the server ignored the Range request (HTTP 200)")
            self._start_fresh(served)
            return True
        start = parse_content_range(response.getheader("Content-Range"))
        if start is None or start.start != self.offset:
            self._restart(f"the server answered a range other than bytes={self.offset}-")
            return False
        change = self.validator.change_to(served) if self.validator else None
        if change is not None:
            self._restart(change)
            return False
        if self.validator is None:
            self._start_fresh(served)
        elif self.offset > 0:
            self.resumes += 1
            log.info("%s: resuming at byte %d of %s", self.url, self.offset, served.total)
        return True

    def _start_fresh(self, served: Validator) -> None:
        """Begin the part from byte 0 for the version ``served`` (checked against ``size``)."""
        if self.size is not None and served.total is not None and served.total != self.size:
            self.part.discard()
            raise DownloadError(
                f"{self.url} is {served.total} bytes long but {self.dest} should be {self.size} "
                "bytes; check the URL and the expected size"
            )
        self.part.start(self.url, self.sha256, served)
        self.validator, self.offset, self.digest = served, 0, hashlib.sha256()

    def _restart(self, why: str) -> None:
        """Throw the part away: its bytes belong to another version or cannot be continued."""
        log.warning(
            "%s: %s; discarding the %d bytes in %s and starting again",
            self.url, why, self.offset, self.part.path,
        )  # fmt: skip
        self.restarts += 1
        self.last_failure = why
        self.part.discard()
        self.validator, self.offset, self.digest = None, 0, hashlib.sha256()

    def _receive(self, response: http.client.HTTPResponse) -> None:
        """Append the body to the part, hashing each chunk once it is written."""
        total = self.validator.total if self.validator is not None else None
        total = total if total is not None else self.size
        with open(self.part.path, "ab") as handle:
            while chunk := _read(response, self.url, self.offset):
                handle.write(chunk)
                self.digest.update(chunk)
                self.offset += len(chunk)
                self.transferred += len(chunk)
                if self.on_progress is not None:
                    self.on_progress(self.offset, total)
                if time.monotonic() >= self.deadline:
                    self._give_up(f"{self.policy.max_seconds:g} s")
        if total is not None and self.offset < total:
            raise TransientError(
                f"{self.url}: the connection ended at byte {self.offset} of {total}"
            )

    def _check_budget(self) -> None:
        if self.fruitless >= self.policy.max_attempts:
            self._give_up(_attempts(self.fruitless))
        if time.monotonic() >= self.deadline:
            self._give_up(f"{self.policy.max_seconds:g} s")

    def _wait_before_retry(self, failure: TransientError) -> None:
        if self.fruitless >= self.policy.max_attempts:
            self._give_up(_attempts(self.fruitless))
        delay = self.policy.delay(self.fruitless, failure.retry_after)
        if time.monotonic() + delay >= self.deadline:
            self._give_up(f"{self.policy.max_seconds:g} s")
        log.warning("%s (attempt %d); retrying in %.2f s", failure.reason, self.attempts, delay)
        time.sleep(delay)

    def _give_up(self, budget: str) -> NoReturn:
        raise DownloadError(
            f"downloading {self.url} to {self.dest} gave up after {budget} "
            f"(last failure: {self.last_failure}); {self.offset} bytes are kept in "
            f"{self.part.path} and running again resumes from there"
        )

    def _commit(self) -> None:
        """Rename the part into place if it is the expected file; otherwise delete it."""
        actual = self.digest.hexdigest()
        size_ok = self.size is None or self.offset == self.size
        if actual != self.sha256 or not size_ok:
            self.part.discard()
            expected_size = "" if self.size is None else f" ({self.size} bytes)"
            raise DownloadError(
                f"{self.dest} downloaded from {self.url} has sha256 {actual} ({self.offset} "
                f"bytes) but sha256 {self.sha256}{expected_size} was expected; the download "
                "was deleted: check the URL and the expected checksum"
            )
        fsync_file(self.part.path)
        os.replace(self.part.path, self.dest)
        fsync_dir(self.dest.parent)
        remove_quietly(self.part.sidecar)
        log.info("%s: %d bytes verified and saved as %s", self.url, self.offset, self.dest)


def _attempts(count: int) -> str:
    return f"{count} attempt{'' if count == 1 else 's'} in a row without a new byte"


def _served_version(response: http.client.HTTPResponse) -> Validator:
    """The version an answer carries: ETag, Last-Modified, total size (206: from Content-Range)."""
    if response.status == 206:
        parsed = parse_content_range(response.getheader("Content-Range"))
        total = parsed.total if parsed is not None else None
    else:
        total = response.length
    return Validator(response.getheader("ETag"), response.getheader("Last-Modified"), total)


def _read(response: http.client.HTTPResponse, url: str, offset: int) -> bytes:
    """What the connection has of the body now, up to READ_CHUNK (b"" at its end); a broken
    connection is transient. read1, not read: read waits for a full chunk, and a read that
    times out loses what it had gathered (up to 1 MiB at every stall)."""
    try:
        return response.read1(READ_CHUNK)
    except (OSError, http.client.HTTPException) as exc:
        raise TransientError(f"{url}: the connection broke at byte {offset}: {exc!r}") from exc
