"""Debian's copy of an upstream tarball: version parsing, pool paths, a cached download."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from nodeprep.lab.debsource import (
    fetch_orig_tarball,
    orig_version,
    parse_apt_show,
    pool_url,
)
from nodeprep.lab.errors import LabError
from nodeprep.lab.fileserve import serve_directory

APT_SHOW_TMUX = """Package: tmux
Version: 3.3a-3
Installed-Size: 1095
Maintainer: Romain Francoise <rfrancoise@debian.org>
Architecture: amd64
"""
APT_SHOW_OTHER_SOURCE = """Package: libevent-core-2.1-7t64
Source: libevent (2.1.12-stable-10)
Version: 2.1.12-stable-10+b1
"""


@pytest.mark.parametrize(
    ("debian", "upstream"),
    [("3.3a-3", "3.3a"), ("1:3.5a-3+deb13u1", "3.5a"), ("2.1.12-stable-10", "2.1.12-stable"),
     ("1.0", "1.0"), ("2.0+dfsg-1", "2.0+dfsg")],
)  # fmt: skip
def test_orig_version_drops_epoch_and_revision(debian: str, upstream: str) -> None:
    assert orig_version(debian) == upstream


def test_parse_apt_show_same_source() -> None:
    assert parse_apt_show(APT_SHOW_TMUX) == ("tmux", "3.3a-3")


def test_parse_apt_show_source_with_its_own_version() -> None:
    assert parse_apt_show(APT_SHOW_OTHER_SOURCE) == ("libevent", "2.1.12-stable-10")


def test_parse_apt_show_without_fields_is_an_error() -> None:
    with pytest.raises(LabError, match="no Package/Version"):
        parse_apt_show("N: Unable to locate package nothing\n")


def test_pool_url_uses_the_pool_prefix() -> None:
    assert pool_url("http://deb.example/debian/", "tmux", "3.3a") == (
        "http://deb.example/debian/pool/main/t/tmux/tmux_3.3a.orig.tar.gz"
    )
    assert pool_url("http://m/debian", "libevent", "2.1.12-stable").startswith(
        "http://m/debian/pool/main/libe/libevent/libevent_2.1.12-stable.orig"
    )


def test_fetch_downloads_once_and_reuses_the_cache(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    pool = mirror / "pool" / "main" / "t" / "tmux"
    pool.mkdir(parents=True)
    payload = b"not really a tarball, but bytes with a known sha256\n"
    (pool / "tmux_3.3a.orig.tar.gz").write_bytes(payload)
    cache = tmp_path / "cache"

    with serve_directory(mirror) as port:
        got = fetch_orig_tarball(
            "tmux", cache, f"http://127.0.0.1:{port}", candidate=lambda _: ("tmux", "3.3a-3")
        )
    assert got.path == cache / "tmux_3.3a.orig.tar.gz"
    assert got.path.read_bytes() == payload
    assert got.sha256 == hashlib.sha256(payload).hexdigest()
    assert got.upstream_version == "3.3a"

    # The server is gone: a second call must be served from the cache alone.
    again = fetch_orig_tarball("tmux", cache, "http://127.0.0.1:9", lambda _: ("tmux", "3.3a-3"))
    assert again == got


def test_fetch_reports_a_missing_tarball_and_leaves_no_partial_file(tmp_path: Path) -> None:
    (tmp_path / "mirror").mkdir()
    with (
        serve_directory(tmp_path / "mirror") as port,
        pytest.raises(LabError, match=r"Could not download .*tmux_9\.9\.orig\.tar\.gz"),
    ):
        fetch_orig_tarball(
            "tmux", tmp_path / "cache", f"http://127.0.0.1:{port}", lambda _: ("tmux", "9.9-1")
        )
    assert list((tmp_path / "cache").iterdir()) == []
