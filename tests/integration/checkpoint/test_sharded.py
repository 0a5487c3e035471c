"""Sharded checkpoints of a 2-rank FSDP2 job (torchrun, gloo, CPU, loopback only).

The job's parameters and Adam moments are DTensors sharded over a CPU device mesh
(``fully_shard``); each rank writes its own shards and rank 0 commits one manifest over them.
SIGKILLed at random instants (also while writing and committing) and resumed, the job ends
bit-exact with an uninterrupted one; a flipped byte in one rank's shard makes every rank fall
back and says which file on which rank; another world size is refused.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from ports import reserved_port

from .test_torchrun import _env, _kill_job
from .trainer_proc import assert_bit_exact, wait_for_count

HERE = Path(__file__).parent
STEPS = 24


def _job(
    run_dir: Path, out: Path, log: Path, steps: int = STEPS, nproc: int = 2
) -> subprocess.Popen[bytes]:
    torchrun = Path(sys.executable).with_name("torchrun")
    args = [
        str(torchrun), "--nnodes", "1", "--nproc-per-node", str(nproc), "--rdzv-backend",
        "c10d", "--rdzv-endpoint", f"127.0.0.1:{reserved_port()}", str(HERE / "fsdp_proc.py"),
        "--run-dir", str(run_dir), "--steps", str(steps), "--out", str(out),
    ]  # fmt: skip
    env = _env(run_dir.parent / "registry")
    with open(log, "ab") as handle:
        return subprocess.Popen(args, env=env, stdout=handle, stderr=subprocess.STDOUT)


def _states(out: Path) -> list[dict[str, Any]]:
    return [torch.load(out.with_name(f"{out.name}.rank{r}"), weights_only=True) for r in (0, 1)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    where = tmp_path_factory.mktemp("sharded-reference")
    log = where / "ref.log"
    proc = _job(where / "run", where / "ref.pt", log)
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    states = _states(where / "ref.pt")
    for name in ("0.weight", "3.weight"):  # really sharded: each rank holds half the rows
        assert states[0]["model"][name].shape[0] == 128
        assert not torch.equal(states[0]["model"][name], states[1]["model"][name])
    return states


@pytest.mark.timeout(900)
def test_fsdp2_killed_at_random_instants_resumes_bit_exact(
    tmp_path: Path, reference: list[dict[str, Any]]
) -> None:
    rand = random.Random(11)
    run_dir, out, log = tmp_path / "run", tmp_path / "out.pt", tmp_path / "run.log"
    for _ in range(3):
        commits = log.read_text().count("committed") if log.exists() else 0
        proc = _job(run_dir, out, log)
        try:
            wait_for_count(log, r"committed", commits + 1, proc, timeout=240)
            time.sleep(rand.uniform(0.0, 0.4))  # then anywhere: a step, a write, a commit
        finally:
            _kill_job(proc)
    final = _job(run_dir, out, log)
    assert final.wait(timeout=300) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert text.count("resumed=True") >= 2 * 2, text[-3000:]  # both ranks, at least twice
    for rank, (expected, got) in enumerate(zip(reference, _states(out), strict=True)):
        assert_bit_exact(expected, got, f"rank {rank}")


@pytest.mark.timeout(900)
def test_a_flipped_byte_in_one_ranks_shard_makes_every_rank_fall_back(tmp_path: Path) -> None:
    run_dir, out, log = tmp_path / "run", tmp_path / "out.pt", tmp_path / "run.log"
    first = _job(run_dir, out, log, steps=16)
    assert first.wait(timeout=300) == 0, log.read_text()[-3000:]
    newest = run_dir / "ckpt" / "ckpt-0000000016-full"
    shard = newest / "optimizer.rank00001.bin"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))

    again = _job(run_dir, out, log, steps=20)
    assert again.wait(timeout=300) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert (
        "checkpoint rejected on rank 1: ckpt-0000000016-full: optimizer.rank00001.bin sha256 "
        "does not match manifest; trying an older one" in text
    ), text[-3000:]
    assert "rejected on rank 0" not in text
    assert text.count("start step=8 resumed=True") == 2, text[-3000:]  # every rank fell back
    assert text.count("done step=20") == 2

    refused_log = tmp_path / "one.log"
    one = _job(run_dir, tmp_path / "one.pt", refused_log, steps=24, nproc=1)
    assert one.wait(timeout=300) != 0
    assert "was written by 2 rank(s) and this run has 1; resume with the same world size" in (
        refused_log.read_text()
    )
