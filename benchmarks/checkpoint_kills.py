"""Kill/resume campaign for benchmarks/checkpoint.py: SIGKILL the real trainer, compare hashes."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

STEPS, SEED = 150, 11
KILLS_PER_CAMPAIGN = 5


def _args(run_dir: Path, hash_out: Path) -> list[str]:
    return [
        sys.executable, "-m", "nodeprep.trainer", "--run-dir", str(run_dir),
        "--steps", str(STEPS), "--seed", str(SEED), "--checkpoint-every", "3",
        "--full-every", "6", "--keep", "2", "--model-mb", "1", "--threads", "1",
        "--batch-size", "16", "--state-hash-out", str(hash_out),
    ]  # fmt: skip


def _env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    env["NODEPREP_RUN_DIR"] = str(workdir / "registry")
    return env


def _run_to_end(args: list[str], env: dict[str, str], log: Path) -> None:
    with open(log, "ab") as handle:
        code = subprocess.run(args, env=env, stdout=handle, stderr=subprocess.STDOUT, check=False)
    if code.returncode != 0:
        raise RuntimeError(f"trainer exited {code.returncode}; see {log}")


def _train_seconds(log: Path) -> float:
    """How long the reference run spent training (from its per-step timestamps)."""
    times = [
        float(m.group(1)) for m in re.finditer(r"^step \d+ \S+ t=(\S+)$", log.read_text(), re.M)
    ]
    return max(times[-1] - times[0], 0.5)


def _kill_once(
    args: list[str], env: dict[str, str], log: Path, rand: random.Random, window: float
) -> bool:
    """Start, wait for training to begin, SIGKILL at a random instant; False if it ended first."""
    with open(log, "ab") as handle:
        proc = subprocess.Popen(args, env=env, stdout=handle, stderr=subprocess.STDOUT)
    starts = log.read_text().count("start step=")
    deadline = time.monotonic() + 120
    while log.read_text().count("start step=") <= starts and proc.poll() is None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    time.sleep(rand.uniform(0.0, window))
    if proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return True


def campaign(kills: int, workdir: Path, seed: int = 1) -> tuple[int, int]:
    """(kills made, kills whose resumed run ended bit-exact), in campaigns of a few kills each."""
    rand = random.Random(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    env = _env(workdir)
    reference_hash = workdir / "reference.sha256"
    _run_to_end(_args(workdir / "reference", reference_hash), env, workdir / "reference.log")
    expected = reference_hash.read_text().strip()
    window = _train_seconds(workdir / "reference.log")
    made = exact = 0
    index = 0
    while made < kills:
        run_dir = workdir / f"campaign{index}"
        hash_out = workdir / f"campaign{index}.sha256"
        log = workdir / f"campaign{index}.log"
        batch = 0
        while batch < min(KILLS_PER_CAMPAIGN, kills - made):
            batch += _kill_once(_args(run_dir, hash_out), env, log, rand, window)
        _run_to_end(_args(run_dir, hash_out), env, log)
        made += batch
        same = hash_out.read_text().strip() == expected
        exact += batch if same else 0
        print(f"kill campaign {index}: {batch} kills, bit-exact={same}", flush=True)
        index += 1
    return made, exact
