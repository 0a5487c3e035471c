"""The controller wheel's cache key: every input counts, build leftovers do not."""

from __future__ import annotations

from pathlib import Path

from nodeprep import wheel


def _tree(root: Path) -> None:
    for name in ("pyproject.toml", "ansible.cfg", "provision/nodeprep/a.py", "roles/r/x.yml"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)


def test_digest_follows_content_not_leftovers(tmp_path: Path) -> None:
    _tree(tmp_path)
    first = wheel.content_digest(tmp_path)
    cache = tmp_path / "provision/nodeprep/__pycache__"
    cache.mkdir()
    (cache / "a.cpython-311.pyc").write_bytes(b"\0")
    assert wheel.content_digest(tmp_path) == first
    (tmp_path / "roles/r/x.yml").write_text("changed")
    assert wheel.content_digest(tmp_path) != first


def test_this_checkout_is_a_source_root() -> None:
    root = wheel.source_root()
    assert root is not None
    assert (root / "provision" / "nodeprep" / "wheel.py").is_file()
