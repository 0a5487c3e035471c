"""A save made while the background writer process is still starting does not wait for it.

The writer process is a fresh interpreter importing torch (25 s were seen on the lab's
emulated VM); an emergency save on a spot notice in a job's first seconds must not queue
behind that. Until the process says it started, saves are written in the caller.
"""

from __future__ import annotations

import time
from pathlib import Path

from nodeprep.checkpoint import Checkpointer, verify
from nodeprep.checkpoint.store import committed

from .conftest import assert_same_state, make_run


def test_saves_before_the_writer_started_are_written_in_the_caller_then_in_the_process(
    tmp_path: Path,
) -> None:
    run = make_run()
    ckpt = Checkpointer(tmp_path / "ckpt", run.model, run.optimizer, extras=run.extras(), keep=5)
    writer = ckpt._writer
    try:
        assert writer is not None
        assert not writer._started.is_set()  # spawned, not started yet
        run.train(2)
        result = ckpt.save_and_wait(2)
        assert result is not None, ckpt.failures
        assert result.path is not None, ckpt.failures
        assert not writer._in_flight  # nothing went to the process
        verify(Path(result.path))

        deadline = time.monotonic() + 120
        while not writer._started.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert writer._started.is_set(), "the writer process never started"
        run.train(2)
        ckpt.save(4)
        assert writer._in_flight  # this one is the process's
        result = ckpt.wait()
        assert result is not None
        assert (result.step, result.error) == (4, None)
        assert [path.name for path in committed(ckpt.root)] == [
            "ckpt-0000000004-full",
            "ckpt-0000000002-full",
        ]
    finally:
        ckpt.close()
    restored = make_run(init_seed=9)
    assert Checkpointer(tmp_path / "ckpt", restored.model, restored.optimizer,
                        extras=restored.extras(), async_write=False).restore() == 4  # fmt: skip
    assert_same_state(run, restored)


def test_wait_returns_an_inline_save_and_close_ends_a_writer_never_used(tmp_path: Path) -> None:
    run = make_run()
    ckpt = Checkpointer(tmp_path / "ckpt", run.model, run.optimizer, extras=run.extras())
    writer = ckpt._writer
    assert writer is not None
    assert not writer._started.is_set()
    run.train(1)
    ckpt.save(1)
    result = ckpt.wait()
    assert result is not None
    assert result.step == 1
    began = time.monotonic()
    ckpt.close()  # the process is still importing torch: ended, not waited for
    assert time.monotonic() - began < 5
    assert not writer._process.is_alive()
