"""Retention keeps the newest N per layer, deletes only after a commit and skips corrupt copies."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from nodeprep.checkpoint import commit_checkpoint, committed
from nodeprep.checkpoint.store import apply_retention
from nodeprep.checkpoint.writer import write_and_prune


def _names(root: Path) -> list[str]:
    return [p.name for p in committed(root)]


def test_keeps_newest_n_of_each_layer(tmp_path: Path) -> None:
    for step in range(1, 7):
        layer = "full" if step % 2 == 0 else "light"
        result = write_and_prune(
            tmp_path, step, layer, {"m.pt": torch.ones(4) * step}, keep=2, extra={}
        )
        assert result.error is None
    assert _names(tmp_path) == [
        "ckpt-0000000006-full",
        "ckpt-0000000005-light",
        "ckpt-0000000004-full",
        "ckpt-0000000003-light",
    ]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_corrupt_old_checkpoints_do_not_count(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        commit_checkpoint(tmp_path, step, "full", {"m.pt": torch.ones(100) * step})
    os.truncate(tmp_path / "ckpt-0000000002-full" / "m.pt", 10)
    deleted = apply_retention(tmp_path, "full", keep=2)
    assert deleted == ["ckpt-0000000002-full"]
    assert _names(tmp_path) == ["ckpt-0000000003-full", "ckpt-0000000001-full"]


def test_newest_is_kept_with_keep_one(tmp_path: Path) -> None:
    for step in (1, 2):
        write_and_prune(tmp_path, step, "full", {"m.pt": torch.zeros(2)}, keep=1, extra={})
    assert _names(tmp_path) == ["ckpt-0000000002-full"]
