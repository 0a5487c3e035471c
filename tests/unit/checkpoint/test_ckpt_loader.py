"""ResumableLoader: the batch after a resume is the batch that would have come, with workers.

Samples draw noise from torch's and Python's RNGs inside the workers; batches are compared
with torch.equal, never a tolerance.
"""

from __future__ import annotations

import gc
import random
import weakref
from pathlib import Path

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


@pytest.mark.parametrize("persistent", [True, False])
def test_a_dropped_loader_ends_its_workers_at_once_not_at_garbage_collection(
    persistent: bool,
) -> None:
    # A loader in a reference cycle waits for the cyclic collector, which then shuts its
    # workers down wherever it runs (seen waiting out torch's 5 s join per worker).
    gc.disable()
    try:
        loader = ResumableLoader(Noisy(), 6, seed=3, num_workers=2, persistent_workers=persistent)
        batches(loader, 13)  # across two epoch ends, mid-epoch now
        workers = [w.pid for w in loader._batches._workers]  # type: ignore[union-attr]
        dropped = weakref.ref(loader)
        del loader
        assert dropped() is None
    finally:
        gc.enable()
    assert all(not process_alive(pid) for pid in workers)


def test_close_ends_the_workers_and_the_loader_goes_on_where_it_was() -> None:
    reference = batches(ResumableLoader(Noisy(), 6, seed=3), 9)
    with ResumableLoader(Noisy(), 6, seed=3, num_workers=2) as loader:
        first = batches(loader, 4)
        workers = loader.loader._iterator._workers
        loader.close()
        assert not any(w.is_alive() for w in workers)
        assert same(first + batches(loader, 5), reference)
    assert loader.loader._iterator is None


def process_alive(pid: int) -> bool:
    """Whether PID is a live process (a zombie counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class FailsOnce:
    """Noisy, but loading sample 13 fails the first time (in whichever process loads it)."""

    def __init__(self, mark: Path) -> None:
        self.base, self.mark = Noisy(), mark

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 13 and not self.mark.exists():
            self.mark.touch()
            raise OSError("a read failed once")
        return self.base[index]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_batch_that_failed_to_load_comes_again_when_retried(workers: int, tmp_path: Path) -> None:
    reference = batches(ResumableLoader(Noisy(), 6, seed=3), 9)
    with ResumableLoader(FailsOnce(tmp_path / "failed"), 6, seed=3, num_workers=workers) as loader:
        taken: list[torch.Tensor] = []
        failures = 0
        while len(taken) < 9:
            try:
                taken.append(loader.next_batch())
            except OSError:
                failures += 1
        assert failures == 1
        assert same(taken, reference)
        assert loader.state_dict()["consumed"] == 3  # 9 batches: one epoch of 6, then 3
