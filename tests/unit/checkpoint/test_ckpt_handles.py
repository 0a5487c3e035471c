"""``save()`` returns a handle to wait on; ``EmergencyFlag`` chains the handlers it found."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import torch

from nodeprep.checkpoint import Checkpointer, EmergencyFlag

from .conftest import make_run


def test_each_handle_waits_for_its_own_save(checkpointer_factory: Any) -> None:
    run = make_run(width=3000)
    ckpt: Checkpointer = checkpointer_factory(run, async_write=True)
    run.train(1)
    first = ckpt.save(1)
    run.train(1)
    second = ckpt.save(2, "light")  # collects the first save's result before submitting
    assert first.blocked_s >= 0
    assert second.blocked_s >= 0
    result = second.wait()
    assert result is not None
    assert result.error is None
    assert (result.step, result.layer) == (2, "light")
    assert result.path is not None
    assert result.path.endswith("ckpt-0000000002-light")
    assert second.done()
    earlier = first.wait()
    assert earlier is not None
    assert (earlier.step, earlier.layer) == (1, "full")
    assert earlier.path is not None
    assert earlier.path.endswith("ckpt-0000000001-full")


def test_done_turns_true_without_blocking_once_the_writer_reports(
    checkpointer_factory: Any,
) -> None:
    run = make_run(width=3000)
    ckpt: Checkpointer = checkpointer_factory(run, async_write=True)
    handle = ckpt.save(1)
    deadline = time.monotonic() + 60
    while not handle.done():
        assert time.monotonic() < deadline, "the save never ended"
        time.sleep(0.01)
    result = handle.wait()
    assert result is not None
    assert result.error is None


def test_a_refused_save_has_its_failure_at_once(checkpointer_factory: Any) -> None:
    run = make_run()
    ckpt: Checkpointer = checkpointer_factory(run)
    handle = ckpt.save(1, loss=float("nan"))
    assert handle.done()
    result = handle.wait()
    assert result is not None
    assert result.path is None
    assert "checkpoint of step 1 not committed: the loss is nan" in (result.error or "")


def test_a_failed_write_is_its_handles_result(tmp_path: Path) -> None:
    run = make_run()
    (tmp_path / "file").write_text("a file where a directory must go")
    ckpt = Checkpointer(tmp_path / "file" / "ckpt", run.model, run.optimizer, async_write=False)
    try:
        result = ckpt.save(3).wait()
    finally:
        ckpt.close()
    assert result is not None
    assert result.path is None
    assert "saving checkpoint ckpt-0000000003-full" in (result.error or "")


@pytest.fixture
def restored_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _send(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.05)  # the handler runs between bytecodes of this thread


def test_a_framework_handler_already_installed_still_runs(restored_handlers: None) -> None:
    seen: list[int] = []

    def framework(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    signal.signal(signal.SIGUSR1, framework)
    signal.signal(signal.SIGTERM, framework)
    flag = EmergencyFlag()
    flag.install()
    flag.install()  # twice: must not chain to itself
    _send(signal.SIGUSR1)
    _send(signal.SIGTERM)
    request = flag.take()
    assert request is not None
    assert request.signal_name == "SIGTERM"
    assert request.should_exit
    assert seen == [signal.SIGUSR1, signal.SIGTERM]
    flag.uninstall()
    assert signal.getsignal(signal.SIGUSR1) is framework
    assert signal.getsignal(signal.SIGTERM) is framework


def test_chain_false_leaves_the_previous_handler_out(restored_handlers: None) -> None:
    seen: list[int] = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    flag = EmergencyFlag(chain=False)
    flag.install()
    _send(signal.SIGUSR1)
    assert flag.take() is not None
    assert seen == []


def test_the_default_action_is_not_chained(restored_handlers: None) -> None:
    """SIGTERM's default would end the process before the loop saves: never called."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    flag = EmergencyFlag()
    flag.install()
    _send(signal.SIGTERM)  # this process is still here to assert
    assert flag.peek() is not None
    flag.uninstall()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert torch.ones(1).item() == 1.0
