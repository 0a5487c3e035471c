"""The two ways a download attempt can fail: for good, or for now.

Kept apart from the code that raises them so that the HTTP exchange and the
retry loop can share them without importing each other.
"""

from __future__ import annotations


class DownloadError(Exception):
    """A download failed and will not succeed by retrying; the message says why and what to do."""


class TransientError(Exception):
    """One attempt failed in a way that a later attempt may not (reset, timeout, 5xx, 429).

    ``retry_after`` is the server's own estimate, in seconds, when it sent one.
    """

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
