"""SIGUSR1 and SIGTERM make the real trainer commit a checkpoint at the next step boundary."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from nodeprep import contract
from nodeprep.checkpoint import verify

from .trainer_proc import start, step_times, trainer_args, trainer_env, wait_for


def _first_step_after(log: Path, instant: float) -> int:
    """The first step logged at or after INSTANT; where none was (the signal came after the
    last step's line, before its boundary, where the trainer saved and stopped), that step."""
    times = step_times(log)
    after = [step for step, done in times.items() if done >= instant]
    return min(after) if after else max(times)


@pytest.mark.timeout(300)
def test_sigusr1_then_sigterm_checkpoint_within_one_step(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    env = trainer_env(registry)
    run_dir = tmp_path / "run"
    log = tmp_path / "trainer.log"
    args = trainer_args(run_dir, 100000, 5, 100000, 100000)
    proc = start(args, env, log)
    try:
        wait_for(log, r"^step 20 ", proc, timeout=120)
        assert proc.pid in [r.pid for r in contract.registered_trainers(registry / "trainers")]
        proc.send_signal(signal.SIGUSR1)
        wait_for(log, r"signal=SIGUSR1", proc, timeout=60)
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    records = contract.read_emergency_records(run_dir)
    assert [r.signal for r in records] == ["SIGUSR1", "SIGTERM"]
    for record in records:
        assert record.step <= _first_step_after(log, record.signal_time)
        assert record.committed_time >= record.signal_time
        assert verify(Path(record.path)).step == record.step
    assert max(step_times(log)) == records[1].step, "SIGTERM must stop after the save"
    assert not (registry / "trainers" / f"{proc.pid}.json").exists()

    resumed = start(trainer_args(run_dir, records[1].step + 5, 5, 100000, 100000), env, log)
    assert resumed.wait(timeout=120) == 0
    assert f"start step={records[1].step} resumed=True" in log.read_text()
