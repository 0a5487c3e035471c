"""The reference trainer with a DataLoader of 2 workers (`--workers 2`), SIGKILLed at random
steps, resumed: its final state hash equals an uninterrupted run's without workers, and the
last resume, with no workers, shows the worker count is free to change."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from .trainer_proc import start, trainer_args, trainer_env, wait_for_count

STEPS, SEED = 80, 4


@pytest.mark.timeout(600)
def test_sigkill_with_two_workers_resumes_bit_exact(tmp_path: Path) -> None:
    env = trainer_env(tmp_path / "registry")

    def args(run: str, workers: int) -> list[str]:
        out = tmp_path / f"{run}.hash"
        return trainer_args(tmp_path / run, STEPS, SEED, 5, 10, "--workers", str(workers),
                            "--state-hash-out", str(out))  # fmt: skip

    log = tmp_path / "reference.log"
    assert start(args("reference", 0), env, log).wait(timeout=300) == 0, log.read_text()[-2000:]
    rand, log = random.Random(17), tmp_path / "run.log"
    for attempt in range(2):
        proc = start(args("run", 2), env, log)
        wait_for_count(log, r"^step \d+ ", 15 * (attempt + 1) + rand.randint(1, 10), proc, 240)
        time.sleep(rand.uniform(0, 0.1))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    final = start(args("run", 0), env, log)
    assert final.wait(timeout=300) == 0, log.read_text()[-2000:]
    text = log.read_text()
    assert text.count("resumed=True") == 2, text[-2000:]
    expected = (tmp_path / "reference.hash").read_text()
    assert (tmp_path / "run.hash").read_text() == expected
