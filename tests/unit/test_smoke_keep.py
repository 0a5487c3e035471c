"""smoke_drill's keep_checkpoints: a passing drill's checkpoints replace the kept directory
whole (the drill itself runs in the lab's quick-start chain, inside the image)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collection_plugins import load

smoke = load("smoke_drill")


def _checkpoints(root: Path, *steps: int) -> Path:
    for step in steps:
        ckpt = root / f"ckpt-{step:010d}-full"
        ckpt.mkdir(parents=True)
        (ckpt / "model.pt").write_bytes(bytes([step]) * 64)
    return root


def test_keep_replaces_the_previous_drills_checkpoints_and_leaves_no_temporaries(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "kept" / "checkpoints"
    smoke.keep(str(_checkpoints(tmp_path / "run1", 4, 8)), str(dest))
    assert sorted(p.name for p in dest.iterdir()) == [
        "ckpt-0000000004-full",
        "ckpt-0000000008-full",
    ]
    smoke.keep(str(_checkpoints(tmp_path / "run2", 12)), str(dest))
    assert [p.name for p in dest.iterdir()] == ["ckpt-0000000012-full"]
    assert (dest / "ckpt-0000000012-full" / "model.pt").read_bytes() == bytes([12]) * 64
    assert [p.name for p in dest.parent.iterdir()] == ["checkpoints"]


def test_keep_that_cannot_copy_leaves_the_kept_directory_as_it_was(tmp_path: Path) -> None:
    dest = tmp_path / "checkpoints"
    smoke.keep(str(_checkpoints(tmp_path / "run1", 4)), str(dest))
    with pytest.raises(FileNotFoundError):
        smoke.keep(str(tmp_path / "no-such-run"), str(dest))
    assert [p.name for p in dest.iterdir()] == ["ckpt-0000000004-full"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "run1"]
