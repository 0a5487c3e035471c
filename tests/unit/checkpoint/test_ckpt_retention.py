"""Retention keeps the newest N verified per layer, deletes only after a commit, and leaves
alone (and reports) every directory it cannot verify."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch

from nodeprep.checkpoint import commit_checkpoint, committed
from nodeprep.checkpoint.store import Retention, apply_retention
from nodeprep.checkpoint.writer import write_and_prune

from .conftest import run_trainer


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


def test_corrupt_and_stray_directories_are_ignored_left_alone_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for step in (1, 2, 3, 4):
        commit_checkpoint(tmp_path, step, "full", {"m.pt": torch.ones(100) * step})
    os.truncate(tmp_path / "ckpt-0000000003-full" / "m.pt", 10)
    (tmp_path / "ckpt-0000000999-full").mkdir()
    with caplog.at_level(logging.WARNING):
        result = apply_retention(tmp_path, "full", keep=2)
    assert result == Retention(
        deleted=("ckpt-0000000001-full",),
        ignored=("ckpt-0000000999-full", "ckpt-0000000003-full"),
    )
    assert _names(tmp_path) == [
        "ckpt-0000000999-full",
        "ckpt-0000000004-full",
        "ckpt-0000000003-full",
        "ckpt-0000000002-full",
    ]
    assert "ckpt-0000000999-full" in caplog.text
    assert "ckpt-0000000003-full" in caplog.text


def test_fresh_checkpoint_survives_a_newer_named_one(tmp_path: Path) -> None:
    """The checkpoint just written is kept even when a higher step sorts first (e.g. after a
    resume that rejected that higher step)."""
    commit_checkpoint(tmp_path, 9, "full", {"m.pt": torch.ones(4)})
    result = write_and_prune(tmp_path, 5, "full", {"m.pt": torch.zeros(4)}, keep=1, extra={})
    assert result.error is None
    assert _names(tmp_path) == ["ckpt-0000000005-full"]


@pytest.mark.parametrize(("keep", "survivors"), [(1, [60]), (3, [60, 50, 40])])
def test_stray_directory_never_deletes_the_trainers_checkpoints(
    tmp_path: Path, keep: int, survivors: list[int]
) -> None:
    run_dir = tmp_path / "run"
    stray = run_dir / "checkpoints" / "ckpt-0000000999-full"
    stray.mkdir(parents=True)
    args = ["--steps", "60", "--seed", "5", "--checkpoint-every", "10", "--model-mb", "0.2"]
    first = run_trainer(run_dir, *args, "--keep", str(keep))
    assert first.returncode == 0, first.stderr[-3000:]
    expected = [stray.name] + [f"ckpt-{s:010d}-full" for s in survivors]
    assert _names(run_dir / "checkpoints") == expected
    assert "retention ignored ckpt-0000000999-full" in first.stderr
    assert not any(stray.iterdir())  # left exactly as it was
    again = run_trainer(run_dir, *args, "--keep", str(keep))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "start step=60 resumed=True" in again.stdout


def test_newest_is_kept_with_keep_one(tmp_path: Path) -> None:
    for step in (1, 2):
        write_and_prune(tmp_path, step, "full", {"m.pt": torch.zeros(2)}, keep=1, extra={})
    assert _names(tmp_path) == ["ckpt-0000000002-full"]
