"""Launching the real reference trainer as a subprocess, and comparing final states bit for bit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

SMALL = ["--model-mb", "1", "--threads", "1", "--batch-size", "16"]


def trainer_env(registry_root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        NODEPREP_RUN_DIR=str(registry_root),
        PYTHONWARNINGS="ignore",
        CUBLAS_WORKSPACE_CONFIG=":4096:8",
        OMP_NUM_THREADS="1",
    )
    return env


def trainer_args(
    run_dir: Path, steps: int, seed: int, every: int, full_every: int, *extra: str
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nodeprep.trainer",
        "--run-dir",
        str(run_dir),
        "--steps",
        str(steps),
        "--seed",
        str(seed),
        "--checkpoint-every",
        str(every),
        "--full-every",
        str(full_every),
        "--keep",
        "2",
        *SMALL,
        *extra,
    ]


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as handle:
        return subprocess.Popen(args, env=env, stdout=handle, stderr=subprocess.STDOUT)


def wait_for(log: Path, pattern: str, proc: subprocess.Popen[bytes], timeout: float) -> str:
    """The first new log line matching ``pattern``; fails if the process exits or time runs out."""
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if regex.search(line):
                return line
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        time.sleep(0.02)
    raise AssertionError(f"no line matching {pattern!r} in {timeout} s:\n{log.read_text()[-3000:]}")


def wait_for_count(
    log: Path, pattern: str, count: int, proc: subprocess.Popen[bytes], timeout: float
) -> None:
    """Wait until ``count`` log lines match ``pattern`` (the log may hold earlier runs' lines)."""
    regex = re.compile(pattern, re.MULTILINE)
    deadline = time.monotonic() + timeout
    while len(regex.findall(log.read_text(errors="replace"))) < count:
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {count} lines matching {pattern!r} in {timeout} s")
        time.sleep(0.02)


def assert_bit_exact(left: Any, right: Any, where: str = "state") -> None:
    """torch.equal on every tensor, == on everything else, same structure throughout."""
    if isinstance(left, torch.Tensor):
        assert isinstance(right, torch.Tensor), where
        assert left.dtype == right.dtype, where
        assert torch.equal(left, right), where
    elif isinstance(left, dict):
        assert isinstance(right, dict), where
        assert left.keys() == right.keys(), where
        for key in left:
            assert_bit_exact(left[key], right[key], f"{where}.{key}")
    elif isinstance(left, list | tuple):
        assert type(left) is type(right), where
        assert len(left) == len(right), where
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            assert_bit_exact(a, b, f"{where}[{index}]")
    else:
        assert left == right, f"{where}: {left!r} != {right!r}"


def load_state(path: Path) -> Any:
    return torch.load(path, weights_only=True)


def step_times(log: Path) -> dict[int, float]:
    """Completion time of every step the trainer logged (the last run's, if it ran several)."""
    times: dict[int, float] = {}
    for match in re.finditer(r"^step (\d+) loss=\S+ t=(\S+)$", log.read_text(), re.MULTILINE):
        times[int(match.group(1))] = float(match.group(2))
    return times
