"""download() refuses what it must: corrupt copies, bad input, errors, unsafe redirects.

Each refusal is checked for its message (it names the input at fault), for
the files it leaves (none of its own) and, through the server's request log,
for the requests it made (none, when the input alone is wrong).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from nodeprep.data import DownloadError, download

from .conftest import FAST, FILE_SIZE, MIB, leftovers, sha256
from .flaky_server import FILE_PATH, Drop, FlakyServer

pytestmark = pytest.mark.timeout(60)


def test_a_corrupted_copy_is_rejected_and_leaves_nothing(
    server: FlakyServer, content: bytes, dest: Path
) -> None:
    server.faults.corrupt = True
    middle = FILE_SIZE // 2
    corrupted = content[:middle] + bytes([content[middle] ^ 0xFF]) + content[middle + 1 :]

    with pytest.raises(DownloadError) as failure:
        download(server.url(), dest, sha256(content), policy=FAST)

    message = str(failure.value)
    for named in (str(dest), server.url(), sha256(content), sha256(corrupted)):
        assert named in message
    assert leftovers(dest) == []


def test_a_second_call_transfers_nothing(server: FlakyServer, content: bytes, dest: Path) -> None:
    download(server.url(), dest, sha256(content), size=FILE_SIZE, policy=FAST)
    requests_before, mtime_before = len(server.requests), dest.stat().st_mtime_ns

    again = download(server.url(), dest, sha256(content), size=FILE_SIZE, policy=FAST)

    assert (again.bytes_transferred, again.attempts) == (0, 0)
    assert len(server.requests) == requests_before == 1
    assert dest.stat().st_mtime_ns == mtime_before
    assert dest.read_bytes() == content


def test_a_wrong_existing_file_is_replaced(server: FlakyServer, content: bytes, dest: Path) -> None:
    dest.write_bytes(content[:-1] + b"?")

    result = download(server.url(), dest, sha256(content), policy=FAST)

    assert dest.read_bytes() == content
    assert result.bytes_transferred == FILE_SIZE


def test_a_404_fails_at_once_naming_url_and_status(server: FlakyServer, dest: Path) -> None:
    url = server.url("/no-such-file.bin")

    with pytest.raises(DownloadError, match=r"answered HTTP 404") as failure:
        download(url, dest, "0" * 64, policy=FAST)

    assert url in str(failure.value)
    assert len(server.requests) == 1
    assert leftovers(dest) == []


@pytest.mark.parametrize(
    "bad",
    ["A" * 64, "0" * 63, "g" * 64, " " + "0" * 63, ""],
    ids=["uppercase", "short", "not-hex", "space", "empty"],
)
def test_a_bad_sha256_is_refused_before_any_request(
    server: FlakyServer, dest: Path, bad: str
) -> None:
    with pytest.raises(DownloadError, match=r"64 lowercase hexadecimal digits"):
        download(server.url(), dest, bad, policy=FAST)

    assert server.requests == []
    assert leftovers(dest) == []


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/data.bin", "file:///etc/passwd", "data.bin"])
def test_only_http_and_https_urls_are_accepted(
    server: FlakyServer, content: bytes, dest: Path, url: str
) -> None:
    with pytest.raises(DownloadError, match=r"not an http:// or https:// URL"):
        download(url, dest, sha256(content), policy=FAST)

    assert leftovers(dest) == []


def test_redirects_are_followed_to_http_only(
    server: FlakyServer, content: bytes, dest: Path
) -> None:
    server.faults.redirects = {"/moved": FILE_PATH, "/to-ftp": "ftp://127.0.0.1/data.bin"}

    with pytest.raises(DownloadError, match=r"redirects to ftp://127\.0\.0\.1/data\.bin"):
        download(server.url("/to-ftp"), dest, sha256(content), policy=FAST)
    assert [r.path for r in server.requests] == ["/to-ftp"]

    result = download(server.url("/moved"), dest, sha256(content), policy=FAST)
    assert dest.read_bytes() == content
    assert result.attempts == 1


def test_a_wrong_expected_size_fails_before_the_body(
    server: FlakyServer, content: bytes, dest: Path
) -> None:
    with pytest.raises(DownloadError, match=rf"is {FILE_SIZE} bytes long but .* {FILE_SIZE - 1}"):
        download(server.url(), dest, sha256(content), size=FILE_SIZE - 1, policy=FAST)

    assert server.requests[0].sent < FILE_SIZE
    assert leftovers(dest) == []


def test_a_part_of_unknown_origin_is_never_resumed(
    server: FlakyServer, content: bytes, dest: Path
) -> None:
    """A .part without its sidecar, or recorded for another URL, could splice two files."""
    part = dest.with_name("data.bin.part")
    part.write_bytes(b"x" * MIB)
    sidecar = dest.with_name("data.bin.part.json")

    download(server.url(), dest, sha256(content), policy=FAST)
    assert dest.read_bytes() == content
    dest.unlink()

    part.write_bytes(b"x" * MIB)
    record = {"url": "http://elsewhere/data.bin", "sha256": sha256(content)}
    sidecar.write_text(json.dumps({**record, "etag": server.etag, "last_modified": None}))
    download(server.url(), dest, sha256(content), policy=FAST)

    assert dest.read_bytes() == content
    assert server.range_starts() == [None, None]


def test_a_complete_part_from_a_crash_is_committed_without_a_request(
    server: FlakyServer, content: bytes, dest: Path
) -> None:
    """A crash between the last byte and the rename costs nothing but a re-hash."""
    server.faults.drops = [Drop(FILE_SIZE - 1, outage=30.0)]
    # 3 s: time for every byte but the last to arrive on a busy machine; the server then stays
    # away for 30 s, so the download gives up with all of them in the part file.
    with pytest.raises(DownloadError, match=r"gave up after 3 s"):
        download(server.url(), dest, sha256(content), policy=replace(FAST, max_seconds=3))
    part = dest.with_name("data.bin.part")
    with open(part, "ab") as handle:
        handle.write(content[-1:])
        os.fsync(handle.fileno())

    # The server is still away: any request would fail.
    result = download(server.url(), dest, sha256(content), policy=FAST)

    assert dest.read_bytes() == content
    assert (result.attempts, len(server.requests)) == (0, 1)
    assert leftovers(dest) == ["data.bin"]
