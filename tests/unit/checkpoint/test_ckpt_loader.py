"""ResumableLoader: the batch after a resume is the batch that would have come, with workers.

Samples draw noise from torch's and Python's RNGs inside the workers; batches are compared
with torch.equal, never a tolerance.
"""

from __future__ import annotations

import random

import pytest
import torch

from nodeprep.checkpoint.loader import ResumableLoader


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
