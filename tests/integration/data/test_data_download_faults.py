"""download() against real network faults: drops, resets, outages, stalls, changes, no Range.

Every fault is a real socket event of the local flaky server; assertions read
the bytes on disk and the server's own request log, never the client's word.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import replace
from pathlib import Path

import pytest

from nodeprep.data import DownloadError, download

from .conftest import FAST, FILE_SIZE, MIB, leftovers, sha256
from .flaky_server import Drop, FlakyServer

pytestmark = pytest.mark.timeout(60)


def test_completes_after_several_drops_resuming_at_each_offset(
    server: FlakyServer, content: bytes, dest: Path
) -> None:
    offsets = [MIB // 2, 3 * MIB // 2, 5 * MIB // 2, 7 * MIB // 2]
    server.faults.drops = [Drop(offset) for offset in offsets]
    progress: list[tuple[int, int | None]] = []

    result = download(
        server.url(), dest, sha256(content), policy=FAST, on_progress=lambda *a: progress.append(a)
    )

    assert dest.read_bytes() == content
    assert server.range_starts() == [None, *offsets]
    assert [r.if_range for r in server.requests[1:]] == [server.etag] * len(offsets)
    assert server.bytes_sent < 1.5 * FILE_SIZE
    assert (result.resumes, result.restarts, result.attempts) == (4, 0, 5)
    assert result.bytes_transferred == FILE_SIZE
    assert progress[-1] == (FILE_SIZE, FILE_SIZE)
    assert leftovers(dest) == ["data.bin"]


def test_drops_that_bring_bytes_do_not_use_up_the_attempts(
    server: FlakyServer, content: bytes, dest: Path
) -> None:
    """A long download over a link that drops often must finish: only fruitless tries count."""
    server.faults.drops = [Drop(offset * MIB // 4) for offset in range(1, 16)]

    result = download(server.url(), dest, sha256(content), policy=replace(FAST, max_attempts=2))

    assert dest.read_bytes() == content
    assert (result.attempts, result.resumes) == (16, 15)


def test_connection_resets_are_retried(server: FlakyServer, content: bytes, dest: Path) -> None:
    # Linux drops received-but-unread bytes on an RST; the pause lets the client read them.
    server.faults.drops = [Drop(MIB, reset=True, stall=0.2), Drop(3 * MIB, reset=True, stall=0.2)]

    result = download(server.url(), dest, sha256(content), policy=FAST)

    assert dest.read_bytes() == content
    assert server.range_starts() == [None, MIB, 3 * MIB]
    assert result.resumes == 2


def test_resumes_after_a_server_outage(server: FlakyServer, content: bytes, dest: Path) -> None:
    server.faults.drops = [Drop(2 * MIB, outage=1.5)]

    result = download(server.url(), dest, sha256(content), policy=FAST)

    assert dest.read_bytes() == content
    (went, back) = server.outages[0]
    assert back - went >= 1.4
    assert server.range_starts() == [None, 2 * MIB]
    assert server.requests[1].at >= back
    # Refused connections never reach the server log; the client counts them as attempts.
    assert result.attempts > 2
    assert result.resumes == 1
    assert result.seconds >= 1.4


def test_gives_up_within_its_deadline_and_a_later_call_resumes(
    server: FlakyServer, content: bytes, dest: Path
) -> None:
    server.faults.drops = [Drop(2 * MIB, outage=3.0)]
    impatient = replace(FAST, max_seconds=1.0)

    started = time.monotonic()
    with pytest.raises(DownloadError, match=r"gave up after 1 s.*running again resumes"):
        download(server.url(), dest, sha256(content), policy=impatient)

    assert time.monotonic() - started < 2.0
    part = dest.with_name("data.bin.part")
    assert part.read_bytes() == content[: 2 * MIB]
    sidecar = json.loads(dest.with_name("data.bin.part.json").read_text())
    assert (sidecar["etag"], sidecar["total"]) == (server.etag, FILE_SIZE)
    assert not dest.exists()

    result = download(server.url(), dest, sha256(content), policy=FAST)

    assert dest.read_bytes() == content
    assert server.range_starts() == [None, 2 * MIB]
    assert (result.resumes, result.bytes_transferred) == (1, FILE_SIZE - 2 * MIB)


def test_a_stalled_connection_times_out_and_resumes(
    server: FlakyServer, content: bytes, dest: Path
) -> None:
    # Not on a MiB boundary: every byte that came before the stall is kept, none waits for
    # a full read chunk (a read that timed out lost up to 1 MiB once).
    stalled_at = MIB + MIB // 2 + 12345
    server.faults.drops = [Drop(stalled_at, stall=8.0)]
    policy = replace(FAST, timeout_seconds=0.5)

    result = download(server.url(), dest, sha256(content), policy=policy)

    assert dest.read_bytes() == content
    assert server.range_starts() == [None, stalled_at]
    assert result.seconds < 4.0


@pytest.mark.parametrize("honour_if_range", [True, False], ids=["if-range", "etag-check"])
def test_a_file_changed_mid_download_restarts_cleanly(
    server: FlakyServer,
    content: bytes,
    dest: Path,
    honour_if_range: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server's If-Range answers 200; without it the client's own ETag check must catch it."""
    new = random.Random(2).randbytes(FILE_SIZE)
    server.faults.honour_if_range = honour_if_range
    server.faults.drops = [Drop(3 * MIB // 2, new_content=new, new_etag='"v2"')]

    with caplog.at_level(logging.WARNING, logger="nodeprep.data"):
        result = download(server.url(), dest, sha256(new), policy=FAST)

    assert dest.read_bytes() == new
    assert result.restarts == 1
    assert server.requests[1].if_range == '"v1"'
    statuses = [r.status for r in server.requests]
    assert statuses == ([200, 200] if honour_if_range else [200, 206, 200])
    assert 'ETag changed from "v1" to "v2"' in caplog.text
    assert leftovers(dest) == ["data.bin"]


def test_a_server_ignoring_range_restarts_from_zero(
    server: FlakyServer, content: bytes, dest: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.faults.ignore_range = True
    server.faults.drops = [Drop(MIB)]

    with caplog.at_level(logging.WARNING, logger="nodeprep.data"):
        result = download(server.url(), dest, sha256(content), policy=FAST)

    assert dest.read_bytes() == content
    assert [(r.range, r.status) for r in server.requests] == [
        (None, 200),
        (f"bytes={MIB}-", 200),
    ]
    assert (result.restarts, result.resumes) == (1, 0)
    assert result.bytes_transferred == FILE_SIZE + MIB
    assert "ignored the Range request" in caplog.text


@pytest.mark.parametrize(
    ("status", "retry_after", "max_delay", "min_s", "max_s"),
    [(503, "1", 5.0, 1.0, 3.0), (429, "120", 0.2, 0.15, 2.0), (500, None, 0.3, 0.0, 2.0)],
    ids=["503-waits-retry-after", "429-capped-at-max-delay", "500-backs-off"],
)
def test_retryable_statuses_wait_and_retry(
    server: FlakyServer,
    content: bytes,
    dest: Path,
    status: int,
    retry_after: str | None,
    max_delay: float,
    min_s: float,
    max_s: float,
) -> None:
    headers = {"Retry-After": retry_after} if retry_after else {}
    server.faults.statuses = [(status, headers)]
    policy = replace(FAST, max_delay=max_delay, jitter=0.0)

    result = download(server.url(), dest, sha256(content), policy=policy)

    assert dest.read_bytes() == content
    assert [r.status for r in server.requests] == [status, 200]
    assert min_s <= result.seconds < max_s
    assert result.attempts == 2
