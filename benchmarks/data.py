"""Data path benchmark: the resumable loader against a plain DataLoader, download goodput under
dropped connections, and SIGKILL trials of the trainer on a staged data set.

Usage: python benchmarks/data.py [--quick] [--rounds N] [--trials K] [--dir DIR]

1. Loader throughput, over the same shards (a data set `python -m nodeprep.trainer.shards`
   writes): `ResumableLoader` and a plain `torch.utils.data.DataLoader` (shuffled, its own
   generator, the same batch size, persistent workers) with 0 and 2 workers, alternated
   round by round; samples/s is the median over the rounds, each round after a warm-up.
2. The download of benchmarks/data_download.py: one file served by the tests' flaky server on
   127.0.0.1 with connections cut at evenly spaced offsets; goodput = file bytes / bytes sent.
3. Kill trials: the reference trainer with `--data` and `--workers 2`, SIGKILLed at a random
   step and resumed, against an uninterrupted run's state hash (bit-exact or not).

--quick keeps every key: 1 round, 1 trial, a 16 MiB download. The last line is JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from data_download import _flaky_server, run_once
from nodeprep.checkpoint import ResumableLoader
from nodeprep.trainer import shards
from nodeprep.trainer.model import Samples

BATCH = 64


def drain(batches: Any, count: int) -> float:
    """Seconds to take COUNT batches from BATCHES (an iterator or a loader's next_batch)."""
    started = time.perf_counter()
    for _ in range(count):
        next(batches) if not callable(batches) else batches()
    return time.perf_counter() - started


def plain_batches(samples: Samples, workers: int, seed: int) -> Any:
    """An endless iterator over a plain shuffled DataLoader (new epochs as they end)."""
    loader = DataLoader(samples, batch_size=BATCH, shuffle=True, drop_last=True,
                        num_workers=workers, persistent_workers=workers > 0,
                        generator=torch.Generator().manual_seed(seed))  # fmt: skip
    while True:
        yield from loader


def loader_rounds(samples: Samples, rounds: int, batches: int) -> dict[int, dict[str, float]]:
    """Median samples/s per worker count, resumable and plain, alternated each round."""
    figures: dict[int, dict[str, list[float]]] = {0: {"resumable": [], "plain": []},
                                                  2: {"resumable": [], "plain": []}}  # fmt: skip
    for round_ in range(rounds):
        for workers in (0, 2):
            kinds = ("resumable", "plain") if round_ % 2 == 0 else ("plain", "resumable")
            for kind in kinds:
                if kind == "resumable":
                    loader = ResumableLoader(samples, BATCH, seed=round_, num_workers=workers)
                    source: Any = loader.next_batch
                else:
                    source = plain_batches(samples, workers, round_)
                drain(source, 10)  # warm-up: workers started, first batches prefetched
                seconds = drain(source, batches)
                figures[workers][kind].append(batches * BATCH / seconds)
                # End this loader's workers here, before the next one forks (a worker that
                # inherits a live iterator would try to shut it down from the wrong process).
                if kind == "plain":
                    source.close()
                else:
                    loader._batches = None
                del source
                gc.collect()
    return {
        w: {k: statistics.median(v) for k, v in kinds_.items()} for w, kinds_ in figures.items()
    }


def trainer(
    run_dir: Path, data: Path, steps: int, workers: int, log: Path
) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "nodeprep.trainer", "--run-dir", str(run_dir), "--steps",
            str(steps), "--seed", "3", "--checkpoint-every", "5", "--full-every", "10",
            "--data", str(data), "--workers", str(workers), "--threads", "1",
            "--state-hash-out", str(run_dir / "hash.txt")]  # fmt: skip
    env = {**os.environ, "NODEPREP_RUN_DIR": str(run_dir.parent / "registry")}
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)


def steps_logged(log: Path) -> int:
    return len(re.findall(r"^step \d+ ", log.read_text(), re.M)) if log.exists() else 0


def kill_trials(work: Path, data: Path, trials: int, steps: int) -> list[bool]:
    """Per trial: killed at a random step, resumed to the end; its hash == the reference's."""
    reference = work / "reference"
    if trainer(reference, data, steps, 0, work / "reference.log").wait(timeout=600) != 0:
        raise SystemExit(f"the reference run failed; see {work / 'reference.log'}")
    expected = (reference / "hash.txt").read_text()
    rand, exact = random.Random(11), []
    for trial in range(trials):
        run, log = work / f"trial-{trial}", work / f"trial-{trial}.log"
        target = rand.randint(3, steps - 3)
        proc = trainer(run, data, steps, 2, log)
        deadline = time.monotonic() + 300
        while steps_logged(log) < target and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        if trainer(run, data, steps, 2, log).wait(timeout=600) != 0:
            raise SystemExit(f"trial {trial}'s resume failed; see {log}")
        exact.append((run / "hash.txt").read_text() == expected)
        print(f"kill trial {trial}: SIGKILL after {target} logged steps, bit-exact={exact[-1]}")
    return exact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round, 1 trial, 16 MiB download")
    parser.add_argument("--rounds", type=int, help="loader rounds (default 5)")
    parser.add_argument("--trials", type=int, help="kill trials (default 3)")
    parser.add_argument("--dir", type=Path, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 5)
    trials = args.trials or (1 if args.quick else 3)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = Path(tmp)
        shards.write_dataset(work / "data", shards=4, size=1 << 20, seed=0)
        samples = Samples(shards.load(work / "data")[0])
        loader = loader_rounds(samples, rounds, 100 if args.quick else 300)
        for workers, kinds in loader.items():
            overhead = 100 * (1 - kinds["resumable"] / kinds["plain"])
            print(f"loader, {workers} workers: resumable {kinds['resumable']:.0f} samples/s, "
                  f"plain {kinds['plain']:.0f} samples/s, overhead {overhead:.1f} % "
                  f"(median of {rounds})")  # fmt: skip
        mib, drops = (16, 4) if args.quick else (64, 16)
        content = random.Random(0).randbytes(mib << 20)
        faulty = run_once(_flaky_server(), content, drops, work)
        goodput = len(content) / faulty["sent"]
        print(f"download: {mib} MiB, {drops} drops, {faulty['resumes']} resumes, "
              f"goodput {goodput:.4f}")  # fmt: skip
        exact = kill_trials(work, work / "data", trials, 40)
    two = loader[2]
    summary = {
        "loader_samples_s": round(two["resumable"]),
        "plain_samples_s": round(two["plain"]),
        "resumable_overhead_pct": round(100 * (1 - two["resumable"] / two["plain"]), 2),
        "loader_samples_s_workers0": round(loader[0]["resumable"]),
        "plain_samples_s_workers0": round(loader[0]["plain"]),
        "resumable_overhead_pct_workers0": round(
            100 * (1 - loader[0]["resumable"] / loader[0]["plain"]), 2
        ),
        "loader_rounds": rounds,
        "download_goodput_ratio": round(goodput, 4),
        "download_resumes": faulty["resumes"],
        "kill_trials": trials,
        "kill_trials_bit_exact": sum(exact),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
