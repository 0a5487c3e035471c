"""ResumableLoader: the batch after a resume is the batch that would have come, with workers.

Samples draw noise from torch's and Python's RNGs inside the workers; batches are compared
with torch.equal, never a tolerance.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from nodeprep.checkpoint.loader import ResumableLoader

HERE = Path(__file__).resolve().parent


class Noisy:
    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((3,), float(index)) + torch.randn(3) + random.random()


def batches(loader: ResumableLoader, count: int) -> list[torch.Tensor]:
    return [loader.next_batch() for _ in range(count)]


def same(left: list[torch.Tensor], right: list[torch.Tensor]) -> bool:
    return len(left) == len(right) and all(
        torch.equal(a, b) for a, b in zip(left, right, strict=True)
    )


@pytest.mark.parametrize(("before", "after"), [(2, 0), (0, 2), (2, 3)])
def test_resume_mid_epoch_gives_the_same_batches_for_any_worker_count(
    before: int, after: int
) -> None:
    # 40 samples, batches of 6: 6 batches an epoch; 17 batches cross two epoch ends.
    reference = batches(ResumableLoader(Noisy(), 6, seed=3, num_workers=before), 17)
    first = ResumableLoader(Noisy(), 6, seed=3, num_workers=before)
    taken = batches(first, 8)  # mid-epoch 1, with workers that fetched ahead
    state = first.state_dict()
    assert (state["epoch"], state["consumed"]) == (1, 2)
    second = ResumableLoader(Noisy(), 6, seed=3, num_workers=after)
    second.load_state_dict(state)
    assert same(taken + batches(second, 9), reference)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_leaves_the_training_rng_alone(workers: int) -> None:
    torch.manual_seed(5)
    random.seed(5)
    before = torch.get_rng_state(), random.getstate()
    loader = ResumableLoader(Noisy(), 6, seed=3, num_workers=workers)
    batches(loader, 13)
    loader.load_state_dict(loader.state_dict())  # a new iterator, as after a resume
    batches(loader, 2)
    assert torch.equal(torch.get_rng_state(), before[0])
    assert random.getstate() == before[1]


class Indices:
    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> int:
        return index


def test_an_epoch_is_every_sample_once_per_rank_and_ranks_do_not_overlap() -> None:
    ranks = [ResumableLoader(Indices(), 5, seed=1, rank=r, world_size=2) for r in (0, 1)]
    seen = [[int(i) for batch in batches(r, 4) for i in batch] for r in ranks]
    assert not set(seen[0]) & set(seen[1])
    assert len(set(seen[0]) | set(seen[1])) == 40


def test_a_state_of_another_run_is_refused() -> None:
    state = ResumableLoader(Noisy(), 6, seed=3).state_dict()
    with pytest.raises(ValueError, match="resume with the same seed, batch size"):
        ResumableLoader(Noisy(), 4, seed=3).load_state_dict(state)
    with pytest.raises(ValueError, match="cannot fill one batch of 30 on 2 rank"):
        ResumableLoader(Noisy(), 30, seed=3, world_size=2)


def _run(run_dir: Path, steps: int, workers: int) -> subprocess.Popen[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return subprocess.Popen(
        [sys.executable, str(HERE / "loader_trainer.py"), str(run_dir), str(steps), str(workers)],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_sigkill_at_random_steps_with_two_workers_resumes_bit_exact(tmp_path: Path) -> None:
    steps = 40
    reference = _run(tmp_path / "ref", steps, 0)
    assert reference.wait(timeout=120) == 0
    rand = random.Random(13)
    run_dir = tmp_path / "run"
    for _ in range(3):
        proc = _run(run_dir, steps, 2)
        target = rand.randint(5, 30)
        assert proc.stdout is not None
        for line in proc.stdout:
            if int(line.split()[1]) >= target:
                break
        time.sleep(rand.uniform(0, 0.05))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert _run(run_dir, steps, 2).wait(timeout=120) == 0
    expected = torch.load(tmp_path / "ref" / "final.pt", weights_only=True)
    actual = torch.load(run_dir / "final.pt", weights_only=True)
    assert actual["loader"] == expected["loader"]
    for name, tensor in expected["model"].items():
        assert torch.equal(tensor, actual["model"][name]), name
