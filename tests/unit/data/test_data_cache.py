"""The preprocessing cache: entries round-trip as bytes and JSON (no pickle anywhere), and a
torn, foreign or damaged entry is refused, removed and computed again, never returned."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nodeprep.data import PreprocessCache
from nodeprep.data.cache import MAGIC


def test_a_computed_entry_is_stored_then_read_back(tmp_path: Path) -> None:
    cache, calls = PreprocessCache(tmp_path, "tok-v1"), []

    def compute() -> tuple[bytes, dict[str, int]]:
        calls.append(1)
        return b"\x00\x01payload", {"records": 2}

    assert cache.get_or_compute("shard-000:abc", compute) == (b"\x00\x01payload", {"records": 2})
    assert PreprocessCache(tmp_path, "tok-v1").get_or_compute("shard-000:abc", compute) == (
        b"\x00\x01payload",
        {"records": 2},
    )
    assert len(calls) == 1
    assert cache.path("shard-000:abc").read_bytes().startswith(MAGIC)
    assert [p.name for p in cache.path("shard-000:abc").parent.iterdir()] == [
        cache.path("shard-000:abc").name
    ]  # no temporary file left
    # Another namespace (another preprocessing version) sees nothing.
    assert PreprocessCache(tmp_path, "tok-v2").get("shard-000:abc") is None


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda blob: blob[:5], "not a nodeprep cache entry, or torn before its header"),
        (lambda blob: blob[:20], "torn inside its header"),
        (lambda blob: blob[:-3], "torn: 7 payload bytes of 10"),
        (lambda blob: blob[:-1] + bytes([blob[-1] ^ 1]), "its payload does not match its sha256"),
        (lambda blob: b"\x80\x04\x95pickle" + blob, "not a nodeprep cache entry"),
    ],
)  # fmt: skip
def test_a_torn_or_damaged_entry_is_refused_and_recomputed(
    tmp_path: Path, damage: object, reason: str
) -> None:
    cache = PreprocessCache(tmp_path, "tok-v1")
    path = cache.put("k", b"0123456789", {"n": 1})
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]

    assert cache.get("k") is None
    assert reason in cache.stats.reasons[0]
    assert not path.exists()
    assert cache.get_or_compute("k", lambda: (b"fresh", None)) == (b"fresh", None)
    assert cache.get("k") == (b"fresh", None)


def test_a_foreign_entry_at_the_name_is_refused(tmp_path: Path) -> None:
    cache = PreprocessCache(tmp_path, "tok-v1")
    other = cache.put("other-key", b"their bytes")
    mine = cache.path("my-key")
    mine.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(other, mine)

    assert cache.get("my-key") is None
    assert cache.stats.reasons == ["it belongs to 'tok-v1'/'other-key'"]


def test_a_bad_namespace_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="a cache namespace is 1-128 letters"):
        PreprocessCache(tmp_path, "../escape")
