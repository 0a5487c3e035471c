"""A save that hits a full filesystem fails clearly and leaves the previous checkpoint valid.

Uses a real size-limited tmpfs mounted for the test (root only, the ``small_fs``
fixture) and a real background writer process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeprep.checkpoint import Checkpointer, CheckpointWriteError, load_latest, verify

from .conftest import make_run


def _checkpointer(root: Path, run: Any, stop_on_error: bool) -> Checkpointer:
    ckpt = Checkpointer(
        root,
        run.model,
        run.optimizer,
        extras=run.extras(),
        keep=3,
        async_write=True,
        stop_on_error=stop_on_error,
    )
    assert ckpt.wait_for_writer()  # saves go to the process, not inline while it starts
    return ckpt


def test_disk_full_keeps_previous_checkpoint_and_training_goes_on(small_fs: Path) -> None:
    run = make_run(width=30000)  # a full checkpoint is ~3.6 MB: one fits in 6 MB, two do not
    ckpt = _checkpointer(small_fs / "ckpt", run, stop_on_error=False)
    try:
        run.train(1)
        ckpt.save(1)
        first = ckpt.wait()
        assert first is not None
        assert first.error is None
        run.train(1)
        ckpt.save(2)
        failed = ckpt.wait()
        run.train(1)  # training goes on
    finally:
        ckpt.close()
    assert failed is not None
    assert failed.path is None
    assert failed.error is not None
    assert "ckpt-0000000002-full" in failed.error
    assert "previous checkpoints are intact" in failed.error
    assert "No space left on device" in failed.error
    assert [p.name for p in (small_fs / "ckpt").iterdir()] == ["ckpt-0000000001-full"]
    verify(small_fs / "ckpt" / "ckpt-0000000001-full")
    loaded = load_latest(small_fs / "ckpt")
    assert loaded is not None
    assert loaded.manifest.step == 1


def test_disk_full_can_stop_training(small_fs: Path) -> None:
    run = make_run(width=30000)
    ckpt = _checkpointer(small_fs / "ckpt", run, stop_on_error=True)
    try:
        run.train(1)  # creates the optimizer state that makes a checkpoint ~3.6 MB
        ckpt.save(1)
        ckpt.wait()
        ckpt.save(2)
        with pytest.raises(CheckpointWriteError, match="No space left on device"):
            ckpt.wait()
    finally:
        ckpt.close()
    assert [p.name for p in (small_fs / "ckpt").iterdir()] == ["ckpt-0000000001-full"]
