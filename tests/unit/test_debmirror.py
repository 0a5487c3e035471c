"""The build mirror comes from the host's own apt sources, in either format."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeprep.debmirror import MirrorNotFoundError, debian_mirror, mirror_from_sources

DEB822 = """Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main

Types: deb
URIs: http://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main
"""


def test_deb822_skips_security(tmp_path: Path) -> None:
    (tmp_path / "debian.sources").write_text(DEB822)
    assert mirror_from_sources(tmp_path / "none", tmp_path) == "http://mirror.example/debian"


def test_one_line_format(tmp_path: Path) -> None:
    main = tmp_path / "sources.list"
    main.write_text("# c\ndeb [arch=amd64] http://m.example/debian trixie main\n")
    assert mirror_from_sources(main, tmp_path / "none") == "http://m.example/debian"


def test_no_sources_gives_none(tmp_path: Path) -> None:
    assert mirror_from_sources(tmp_path / "a", tmp_path / "b") is None


def test_env_override_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEPREP_LAB_MIRROR", "http://override.example/debian/")
    assert debian_mirror() == "http://override.example/debian"


def test_missing_mirror_is_one_clear_sentence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("NODEPREP_LAB_MIRROR", raising=False)
    monkeypatch.delenv("NODEPREP_DEBIAN_MIRROR", raising=False)
    monkeypatch.setattr("nodeprep.debmirror.APT_SOURCES", tmp_path / "x")
    monkeypatch.setattr("nodeprep.debmirror.APT_SOURCES_DIR", tmp_path / "y")
    with pytest.raises(MirrorNotFoundError, match="NODEPREP_DEBIAN_MIRROR"):
        debian_mirror()
