"""The rules that decide whether a download may continue: Content-Range and version changes."""

from __future__ import annotations

import pytest

from nodeprep.data.fetch import ContentRange, parse_content_range
from nodeprep.data.partial import Validator


@pytest.mark.parametrize(
    ("header", "parsed"),
    [
        ("bytes 100-199/200", ContentRange(100, 199, 200)),
        ("bytes 0-0/*", ContentRange(0, 0, None)),
        ("bytes */4096", ContentRange(None, None, 4096)),
        ("items 1-2/3", None),
        ("bytes 1-/3", None),
        (None, None),
    ],
)
def test_content_range_is_parsed_strictly(header: str | None, parsed: ContentRange | None) -> None:
    assert parse_content_range(header) == parsed


def test_if_range_uses_a_strong_etag_else_last_modified() -> None:
    date = "Mon, 01 Jan 2024 00:00:00 GMT"

    assert Validator('"abc"', date, 10).if_range() == '"abc"'
    assert Validator('W/"abc"', date, 10).if_range() == date
    assert Validator(None, None, 10).if_range() is None


@pytest.mark.parametrize(
    ("served", "change"),
    [
        (Validator('"v1"', "d1", 10), None),
        (Validator('"v2"', "d1", 10), 'ETag changed from "v1" to "v2"'),
        (Validator('"v1"', "d1", 11), "size changed from 10 to 11"),
        (Validator('"v1"', "d2", 10), None),  # the ETags agree; a new date alone is no change
        (Validator(None, "d2", 10), "Last-Modified changed from d1 to d2"),
        (Validator(None, None, None), None),  # nothing to compare is no evidence
    ],
)
def test_a_version_change_is_named(served: Validator, change: str | None) -> None:
    found = Validator('"v1"', "d1", 10).change_to(served)

    assert (found is None) == (change is None)
    assert change is None or change in (found or "")
