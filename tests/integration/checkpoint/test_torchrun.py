"""Two-process torchrun (gloo, loopback only): the whole job killed, resumed, bit-exact per rank."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proctree import descendants

from .trainer_proc import SMALL, assert_bit_exact, load_state, trainer_env, wait_for_count

STEPS, SEED = 120, 21


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _torchrun(run_dir: Path, out: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    torchrun = Path(sys.executable).with_name("torchrun")
    args = [
        str(torchrun),
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{_free_port()}",
        "-m",
        "nodeprep.trainer",
        "--run-dir",
        str(run_dir),
        "--steps",
        str(STEPS),
        "--seed",
        str(SEED),
        "--checkpoint-every",
        "4",
        "--full-every",
        "8",
        "--device",
        "cpu",
        "--final-state-out",
        str(out),
        *SMALL,
    ]
    with open(log, "ab") as handle:
        return subprocess.Popen(args, env=env, stdout=handle, stderr=subprocess.STDOUT)


def _kill_job(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL torchrun and every process under it at once (its ranks get sessions of their own)."""
    for pid in [proc.pid, *descendants(proc.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)


@pytest.mark.timeout(600)
def test_torchrun_two_ranks_killed_and_resumed_bit_exact(tmp_path: Path) -> None:
    env = trainer_env(tmp_path / "registry")
    env.update(GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")
    rand = random.Random(7)
    reference = _torchrun(tmp_path / "reference", tmp_path / "ref.pt", env, tmp_path / "ref.log")
    assert reference.wait(timeout=300) == 0, (tmp_path / "ref.log").read_text()[-3000:]

    run_dir, out, log = tmp_path / "run", tmp_path / "out.pt", tmp_path / "run.log"
    for _ in range(2):
        commits = log.read_text().count("committed") if log.exists() else 0
        proc = _torchrun(run_dir, out, env, log)
        try:
            # Let each attempt commit something new, then kill at a random instant after.
            wait_for_count(log, r"committed", commits + 2, proc, timeout=180)
            time.sleep(rand.uniform(0.0, 0.3))
        finally:
            _kill_job(proc)
    final = _torchrun(run_dir, out, env, log)
    assert final.wait(timeout=300) == 0, log.read_text()[-3000:]

    text = log.read_text()
    assert text.count("resumed=True") >= 2, text[-3000:]
    for suffix in ("", ".rank1"):
        expected = load_state(tmp_path / f"ref.pt{suffix}")
        assert_bit_exact(expected, load_state(tmp_path / f"out.pt{suffix}"), f"rank{suffix}")
    rank0, rank1 = (load_state(tmp_path / name)["rng"] for name in ("out.pt", "out.pt.rank1"))
    assert not rank0["torch_cpu"].equal(rank1["torch_cpu"]), "each rank keeps its own RNG"
