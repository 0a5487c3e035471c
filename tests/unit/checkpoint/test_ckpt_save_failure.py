"""A failed save is never lost: it is noticed promptly, and the trainer exits 0 only when durable.

Saves fail for real: the run lives on a 6 MiB tmpfs (``small_fs``) where the first full
checkpoint fits and every later one hits "No space left on device".
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nodeprep.checkpoint import Checkpointer, CheckpointWriteError, committed

from .conftest import make_run, run_trainer

TRAINER = ["--steps", "60", "--seed", "5", "--checkpoint-every", "10", "--model-mb", "1"]
WRITERS = pytest.mark.parametrize("writer", [["--sync-save"], []], ids=["sync", "async"])


def _checkpointer(root: Path, run: Any, *, async_write: bool = True) -> Checkpointer:
    ckpt = Checkpointer(
        root, run.model, run.optimizer, extras=run.extras(), async_write=async_write,
        stop_on_error=True,
    )  # fmt: skip
    assert ckpt.wait_for_writer()  # saves go to the process, not inline while it starts
    return ckpt


def _fill_after_first(small_fs: Path, async_write: bool = True) -> tuple[Any, Checkpointer]:
    """A checkpointer whose step-1 save committed; the disk then has no room for another."""
    run = make_run(width=30000)
    ckpt = _checkpointer(small_fs / "ckpt", run, async_write=async_write)
    run.train(1)
    ckpt.save(1)
    ckpt.wait()
    return run, ckpt


def _poll_for(ckpt: Checkpointer, seconds: float) -> None:
    """Poll as the training loop does at each step boundary, and do nothing else."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ckpt.poll()
        time.sleep(0.01)


def test_poll_notices_a_failed_async_save_without_another_save(small_fs: Path) -> None:
    _, ckpt = _fill_after_first(small_fs)
    try:
        ckpt.save(2)
        with pytest.raises(CheckpointWriteError, match=r"ckpt-0000000002-full.*No space left"):
            _poll_for(ckpt, seconds=60)
    finally:
        ckpt.close()


def test_sync_save_failure_raises_from_save_itself(small_fs: Path) -> None:
    _, ckpt = _fill_after_first(small_fs, async_write=False)
    try:
        with pytest.raises(CheckpointWriteError, match="ckpt-0000000002-full"):
            ckpt.save(2)
    finally:
        ckpt.close()


def test_next_save_checks_the_previous_one_before_submitting(small_fs: Path) -> None:
    _, ckpt = _fill_after_first(small_fs)
    try:
        ckpt.save(2)
        with pytest.raises(CheckpointWriteError, match="ckpt-0000000002-full"):
            ckpt.save(3)
    finally:
        ckpt.close()
    assert [p.name for p in committed(small_fs / "ckpt")] == ["ckpt-0000000001-full"]


def test_wait_records_every_finished_save(tmp_path: Path) -> None:
    run = make_run(width=256)
    ckpt = Checkpointer(tmp_path / "ckpt", run.model, run.optimizer, keep=5)
    assert ckpt.wait_for_writer()
    try:
        for step in (1, 2, 3):
            run.train(1)
            ckpt.save(step)
        last = ckpt.wait()
    finally:
        ckpt.close()
    assert [r.step for r in ckpt.history] == [1, 2, 3]
    assert last is not None
    assert last.step == 3
    assert ckpt.last_committed == last


def _train_and_blow_up(ckpt: Checkpointer) -> None:
    """A training loop that fails, closing its checkpointer in ``finally`` as it should."""
    try:
        raise RuntimeError("training blew up")
    finally:
        ckpt.close()


def test_close_never_raises_on_top_of_an_error_in_flight(
    small_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, ckpt = _fill_after_first(small_fs)
    ckpt.save(2)  # fails in the background while the "training" below blows up
    with caplog.at_level(logging.ERROR), pytest.raises(RuntimeError, match="training blew up"):
        _train_and_blow_up(ckpt)
    assert "ckpt-0000000002-full" in caplog.text  # the save failure is still reported


def _last_step(stdout: str) -> int:
    return max(int(s) for s in re.findall(r"^step (\d+) loss=", stdout, re.MULTILINE))


def _assert_one_sentence(stderr: str, name: str, checkpoints: Path) -> None:
    """No traceback, and the last line says which checkpoint failed, where and why."""
    assert "Traceback" not in stderr, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("nodeprep.trainer: stopped at step "), last
    assert f"saving checkpoint {name} in {checkpoints} failed" in last
    assert "No space left on device" in last


@WRITERS
def test_failed_final_save_exits_1_not_done(small_fs: Path, writer: list[str]) -> None:
    run_dir = small_fs / "run"
    result = run_trainer(run_dir, *TRAINER, *writer)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "done step=" not in result.stdout
    assert _last_step(result.stdout) == 60
    _assert_one_sentence(result.stderr, "ckpt-0000000060-full", run_dir / "checkpoints")
    assert [p.name for p in committed(run_dir / "checkpoints")] == ["ckpt-0000000010-full"]


@WRITERS
def test_stop_on_save_error_stops_at_the_first_failed_save(
    small_fs: Path, writer: list[str]
) -> None:
    run_dir = small_fs / "run"
    result = run_trainer(run_dir, *TRAINER, *writer, "--stop-on-save-error")
    assert result.returncode == 1, result.stderr[-3000:]
    assert "done step=" not in result.stdout
    # sync: the failing save itself raises; async: noticed before the next save is submitted
    assert _last_step(result.stdout) <= (20 if writer else 30)
    _assert_one_sentence(result.stderr, "ckpt-0000000020-full", run_dir / "checkpoints")
    assert "ckpt-0000000030-full" not in result.stderr


def test_sigterm_whose_emergency_save_fails_exits_1_not_143(small_fs: Path) -> None:
    """143 says "saved, then stopped"; with no room for the emergency save it is exit 1."""
    run_dir = small_fs / "run"
    env = dict(os.environ, NODEPREP_RUN_DIR=str(small_fs / "registry"), PYTHONWARNINGS="ignore")
    command = [sys.executable, "-m", "nodeprep.trainer", "--run-dir", str(run_dir), "--threads"]
    command += ["1", "--device", "cpu", "--sync-save", *TRAINER[:1], "100000", *TRAINER[2:]]
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # past step 10's checkpoint, which fills the disk
            if line.startswith("step 12 "):
                break
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("nodeprep.trainer: stopped at step "), last
    assert "No space left on device" in last


def test_an_emergency_save_written_synchronously_returns_its_result(tmp_path: Path) -> None:
    """save_and_wait's result is the save's own, also where ``save`` collected it already
    (the trainer writes its emergency record from it)."""
    run = make_run()
    ckpt = Checkpointer(tmp_path / "ckpt", run.model, run.optimizer, extras=run.extras(),
                        async_write=False)  # fmt: skip
    run.train(1)
    result = ckpt.save_and_wait(1)
    assert result is not None
    assert result.step == 1
    assert result.path == str(committed(ckpt.root)[0])
