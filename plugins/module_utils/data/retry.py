"""How long a download keeps trying, and how long it waits between tries.

A data set server that restarts, a load balancer that resets connections, a
rate limit: all of these heal within seconds to minutes, and a node that gives
up at the first error turns a blip into a failed provisioning run. Waiting
grows exponentially so that a fleet of nodes does not hammer a struggling
server, with jitter so that nodes that failed together do not retry together,
and two budgets (attempts and seconds) bound how long a run can hang.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """Retry budget and backoff of one download.

    The defaults suit a data set server on the same network: waits of 0.5 s,
    1 s, 2 s ... capped at 60 s, so a server that answers nothing is given up
    on after 12 attempts and about 5 minutes of waiting.

    A long download over a link that drops now and then must not fail because
    it was cut more than ``max_attempts`` times in all: an attempt that brought
    new bytes starts both the attempt count and the backoff again. Only
    ``max_seconds`` bounds the whole call.

    Attributes:
        max_attempts: requests in a row that bring no new byte, the first
            included (default 12).
        max_seconds: wall-clock budget of the whole call, transfer, retries and
            waits included (default 21600 s, 6 h: 1 TB at 50 MB/s); no wait is
            begun that would end past it, and a transfer still running at it
            stops (the ``.part`` is kept). Size it to the largest file.
        base_delay: the wait before the first retry, in seconds (default 0.5).
        multiplier: growth of the wait per retry (default 2).
        max_delay: the longest wait, and the cap on a server's Retry-After (default 60 s).
        jitter: fraction of each wait that is randomised away, 0 to 1 (default 0.5):
            a wait is drawn from [nominal * (1 - jitter), nominal].
        timeout_seconds: per connect and per read; a stalled server counts as
            a failed attempt after this long (default 30 s).
    """

    max_attempts: int = 12
    max_seconds: float = 21600.0
    base_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 60.0
    jitter: float = 0.5
    timeout_seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts must be 1 or more, not {self.max_attempts}")
        if min(self.max_seconds, self.base_delay, self.max_delay) < 0 or self.multiplier < 1:
            raise ValueError(
                "RetryPolicy needs non-negative max_seconds, base_delay and max_delay "
                f"and a multiplier of at least 1, not {self}"
            )
        if not 0 <= self.jitter <= 1 or self.timeout_seconds <= 0:
            raise ValueError(
                f"RetryPolicy needs a jitter between 0 and 1 and a positive timeout, not {self}"
            )

    def nominal_delay(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1 = the first retry), before jitter."""
        exponent = max(retry - 1, 0)
        # Past the cap the product only overflows; stop multiplying once there.
        delay = self.base_delay
        for _ in range(exponent):
            delay *= self.multiplier
            if delay >= self.max_delay:
                return self.max_delay
        return min(delay, self.max_delay)

    def delay(
        self, retry: int, retry_after: float | None = None, draw: float | None = None
    ) -> float:
        """Seconds to wait before retry number ``retry``.

        A server's Retry-After wins over the backoff (it knows when it will be
        back) but never beyond ``max_delay``. ``draw`` in [0, 1) replaces the
        random draw, so that callers and tests can make the wait exact.
        """
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay)
        fraction = random.random() if draw is None else draw
        return self.nominal_delay(retry) * (1.0 - self.jitter * fraction)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP-date); None when absent or bad."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)
