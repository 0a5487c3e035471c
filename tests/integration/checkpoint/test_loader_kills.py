"""The reference trainer on a staged data set (`--data`, shards and their manifest) with a
DataLoader of 2 workers (`--workers 2`), SIGKILLed at random steps, resumed: its final state hash
equals an uninterrupted run's without workers, and the last resume, with no workers, shows the
worker count is free to change. A resume on a changed data set is refused, naming both
versions, unless allowed."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from nodeprep.trainer.shards import write_dataset

from .trainer_proc import start, trainer_args, trainer_env, wait_for_count

STEPS, SEED = 80, 4


@pytest.mark.timeout(600)
def test_sigkill_with_two_workers_resumes_bit_exact(tmp_path: Path) -> None:
    env = trainer_env(tmp_path / "registry")
    data = tmp_path / "data"
    write_dataset(data, shards=2, size=128 << 10, seed=SEED)

    def args(run: str, workers: int) -> list[str]:
        out = tmp_path / f"{run}.hash"
        return trainer_args(tmp_path / run, STEPS, SEED, 5, 10, "--workers", str(workers),
                            "--data", str(data), "--state-hash-out", str(out))  # fmt: skip

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


@pytest.mark.timeout(300)
def test_a_resume_on_another_data_set_is_refused_unless_allowed(tmp_path: Path) -> None:
    env, data, log = trainer_env(tmp_path / "registry"), tmp_path / "data", tmp_path / "run.log"
    first = write_dataset(data, shards=1, size=64 << 10, seed=1)
    run = [*trainer_args(tmp_path / "run", 10, SEED, 5, 5), "--data", str(data)]
    assert start(run, env, log).wait(timeout=120) == 0, log.read_text()[-2000:]
    second = write_dataset(data, shards=1, size=64 << 10, seed=2)

    refused = start(run, env, log)
    assert refused.wait(timeout=120) == 1
    said = log.read_text().splitlines()[-1]
    assert first in said, said
    assert second in said, said
    assert "--allow-dataset-change" in said, said
    assert start([*run, "--allow-dataset-change"], env, log).wait(timeout=120) == 0
    assert log.read_text().count("done step=10") == 2
