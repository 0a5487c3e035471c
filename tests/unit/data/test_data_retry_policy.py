"""RetryPolicy's waits: exponential, capped, jittered within bounds, Retry-After honoured."""

from __future__ import annotations

import email.utils
import random

import pytest

from nodeprep.data import RetryPolicy
from nodeprep.data.retry import parse_retry_after


def test_waits_double_from_the_base_up_to_the_cap() -> None:
    policy = RetryPolicy(base_delay=0.5, multiplier=2.0, max_delay=6.0)

    waits = [policy.nominal_delay(retry) for retry in range(1, 7)]

    assert waits == [0.5, 1.0, 2.0, 4.0, 6.0, 6.0]
    assert policy.nominal_delay(10_000) == 6.0


def test_jitter_only_shortens_a_wait_and_by_at_most_its_fraction() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=100.0, jitter=0.25)

    assert policy.delay(3, draw=0.0) == 4.0
    assert policy.delay(3, draw=0.999999) == pytest.approx(3.0, abs=1e-5)
    random.seed(5)
    drawn = [policy.delay(3) for _ in range(2000)]
    assert 3.0 <= min(drawn) < 3.1
    assert 3.9 < max(drawn) <= 4.0


def test_no_jitter_gives_exact_waits() -> None:
    policy = RetryPolicy(base_delay=0.1, jitter=0.0)

    assert {policy.delay(2) for _ in range(50)} == {0.2}


def test_retry_after_wins_but_never_beyond_max_delay() -> None:
    policy = RetryPolicy(base_delay=0.1, max_delay=5.0)

    assert policy.delay(1, retry_after=3.0) == 3.0
    assert policy.delay(1, retry_after=3600.0) == 5.0
    assert policy.delay(1, retry_after=-2.0) == 0.0


def test_the_defaults_are_the_documented_ones() -> None:
    policy = RetryPolicy()

    assert (policy.max_attempts, policy.max_seconds) == (12, 21600.0)
    assert (policy.base_delay, policy.multiplier, policy.max_delay) == (0.5, 2.0, 60.0)
    assert (policy.jitter, policy.timeout_seconds) == (0.5, 30.0)
    assert sum(policy.nominal_delay(retry) for retry in range(1, 12)) == 303.5


@pytest.mark.parametrize(
    "fields",
    [{"max_attempts": 0}, {"base_delay": -1.0}, {"multiplier": 0.5}, {"jitter": 1.5}],
    ids=["no-attempts", "negative-delay", "shrinking", "jitter-above-one"],
)
def test_a_nonsensical_policy_is_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="RetryPolicy"):
        RetryPolicy(**fields)  # type: ignore[arg-type]


def test_retry_after_is_read_as_seconds_or_as_an_http_date() -> None:
    now = 1_700_000_000.0
    in_90_s = email.utils.formatdate(now + 90, usegmt=True)

    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(in_90_s, now=now) == pytest.approx(90.0)
    assert parse_retry_after(email.utils.formatdate(now - 90, usegmt=True), now=now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    assert parse_retry_after("  ") is None
