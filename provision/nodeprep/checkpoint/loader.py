"""A DataLoader that resumes mid-epoch bit-exact, with worker processes or without.

torch's ``DataLoader`` with workers asks its sampler for batches ahead of the training loop
(``prefetch_factor`` per worker), and each worker's RNG advances with whichever batches it
happened to load. So neither the sampler's position nor the workers' RNG states say where a
run is, and a resume usually needs ``num_workers=0`` to replay exactly. Here:

- the position is what the training loop consumed: batches are counted as they come out of
  the loader, never as the workers fetch them;
- a batch is loaded whole by one process (the DataLoader hands the worker the batch's key,
  not sample indices), and its randomness (augmentation, noise) comes from ``random`` and
  torch's generator seeded there from (seed, epoch, the batch's place in the epoch) just
  before its samples are asked for, in order. A batch's random draws depend on the batch,
  not on the worker or the schedule. Seeding once per batch, not per sample, keeps the cost
  of this to about a microsecond per sample (benchmarks/data.py).

So the batch after a resume is the batch that would have come, for any worker count
(0 included), with ``persistent_workers`` or without. ``state_dict()`` /
``load_state_dict()`` let it checkpoint through the checkpointer's ``extras``.
"""

from __future__ import annotations

import random
import weakref
from collections.abc import Callable, Generator, Iterator
from typing import Any, NamedTuple

import torch
from torch.utils.data import DataLoader, Dataset, Sampler, default_collate, get_worker_info

from nodeprep.checkpoint.sampler import epoch_permutation


class BatchKey(NamedTuple):
    """What the dataset is asked for: the batch's sample indices and the seed of its draws."""

    samples: tuple[int, ...]
    seed: int


def _as_loaded(batch: Any) -> Any:
    """The DataLoader's collate step: SeededBatches has collated the batch already."""
    return batch


class SeededBatches(Dataset[Any]):
    """Seeds ``random`` and torch before each batch, in whichever process loads it, then
    loads its samples in order and collates them.

    Without workers the batches load in the training process, whose RNGs (dropout, noise)
    must not notice: there they are saved before the batch and put back after it.
    """

    def __init__(self, base: Any, collate: Callable[[list[Any]], Any]) -> None:
        self.base, self.collate = base, collate

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, key: BatchKey) -> Any:
        if get_worker_info() is not None:
            return self._seeded(key)
        saved, saved_torch = random.getstate(), torch.get_rng_state()
        try:
            return self._seeded(key)
        finally:
            random.setstate(saved)
            torch.set_rng_state(saved_torch)

    def _seeded(self, key: BatchKey) -> Any:
        random.seed(key.seed)
        # The CPU generator alone, where datasets draw: torch.manual_seed also visits every
        # accelerator backend, about 200 us a call here against 1.5 us.
        torch.default_generator.manual_seed(key.seed)
        return self.collate([self.base[index] for index in key.samples])


class _EpochBatches(Sampler[BatchKey]):
    """The owner's current epoch from its current position; read at each ``iter()``.

    It holds its owner weakly: with a strong reference the owner and its DataLoader form a
    cycle, a dropped loader waits for the cyclic garbage collector, and the collector then
    shuts its workers down wherever it happens to run, where the shutdown was seen to wait
    out torch's 5 s join timeout per worker.
    """

    def __init__(self, owner: ResumableLoader) -> None:
        self._owner = weakref.ref(owner)

    @property
    def owner(self) -> ResumableLoader:
        owner = self._owner()
        if owner is None:
            raise RuntimeError("the ResumableLoader of this sampler was dropped")
        return owner

    def __len__(self) -> int:
        return self.owner.batches_per_epoch - self.owner.consumed

    def __iter__(self) -> Iterator[BatchKey]:
        owner = self.owner
        # The keys come from a generator that holds plain values: one holding the owner
        # would sit in the DataLoader's iterator and close the cycle again.
        return _epoch_keys(owner.num_samples, owner.seed, owner.epoch, owner.consumed,
                           owner.batches_per_epoch, owner.rank, owner.world_size,
                           owner.batch_size)  # fmt: skip


def _epoch_keys(
    num_samples: int, seed: int, epoch: int, first: int, last: int, rank: int, stride: int,
    size: int,
) -> Iterator[BatchKey]:  # fmt: skip
    order = epoch_permutation(num_samples, seed, epoch).tolist()  # when the first key is asked
    for position in range(first, last):
        start = (position * stride + rank) * size
        yield BatchKey(tuple(order[start : start + size]), batch_seed(seed, epoch, start))


def batch_seed(seed: int, epoch: int, place: int) -> int:
    """The seed of the random draws of the batch starting at ``place`` in ``epoch``'s order
    (the place of its first sample: unique across ranks)."""
    return (seed * 1_000_003 + epoch) * 4_000_037 + place


class ResumableLoader:
    """Batches for one rank, epoch after epoch; resumable where the training loop left off.

    ``next_batch()`` returns the next batch (moving to the next epoch when one ends);
    iterating the loader yields the rest of the current epoch.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        seed: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        num_workers: int = 0,
        persistent_workers: bool | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
    ) -> None:
        self.num_samples = len(dataset)
        if self.num_samples < batch_size * world_size:
            raise ValueError(
                f"{self.num_samples} samples cannot fill one batch of {batch_size} on "
                f"{world_size} rank(s); use more samples or a smaller batch"
            )
        self.batch_size, self.seed = batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.epoch = 0
        self.consumed = 0  # batches of this epoch the training loop has taken
        self._batches: Iterator[Any] | None = None
        persistent = num_workers > 0 if persistent_workers is None else persistent_workers
        self.loader = DataLoader(
            SeededBatches(dataset, collate_fn or default_collate),
            sampler=_EpochBatches(self),
            batch_size=None,  # each key is a whole batch, loaded and collated by one process
            num_workers=num_workers,
            persistent_workers=persistent,
            collate_fn=_as_loaded,
            pin_memory=pin_memory,
            # Its own generator: DataLoader draws its workers' base seed at every new
            # iterator, and from the global RNG that would shift the training's random
            # stream by how often a run was resumed.
            generator=torch.Generator().manual_seed(seed),
        )

    @property
    def batches_per_epoch(self) -> int:
        return self.num_samples // (self.batch_size * self.world_size)

    def __iter__(self) -> Generator[Any, None, None]:
        """The rest of the current epoch; the position advances as each batch is taken."""
        for batch in self.loader:
            self.consumed += 1
            yield batch
        self.epoch, self.consumed = self.epoch + 1, 0

    def next_batch(self) -> Any:
        """The next batch, across epoch ends."""
        while True:
            if self._batches is None:
                # The DataLoader's iterator, not a generator of ours: a generator's frame
                # would hold this loader, and that cycle leaves a dropped loader to the
                # cyclic collector (see _EpochBatches).
                self._batches = iter(self.loader)
            try:
                batch = next(self._batches)
            except StopIteration:
                self._batches = None
                self.epoch, self.consumed = self.epoch + 1, 0
                continue
            except BaseException:
                # The iterator has moved past the batch that failed; a new one starts from
                # the position, so a caller that retries gets that batch again.
                self._batches = None
                raise
            self.consumed += 1
            return batch

    def close(self) -> None:
        """End the worker processes now; the loader can still be iterated (new workers start).

        Dropping the loader ends them too; ``close()`` (or ``with ResumableLoader(...)``) says
        when. torch has no public call for this: its iterator's own shutdown is used.
        """
        self._batches = None
        iterator = getattr(self.loader, "_iterator", None)  # where persistent workers live
        if iterator is not None:
            iterator._shutdown_workers()
            self.loader._iterator = None

    def __enter__(self) -> ResumableLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "consumed": self.consumed,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "num_samples": self.num_samples,
            "rank": self.rank,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` was taken; batches already fetched ahead are dropped."""
        mine = {k: getattr(self, k) for k in ("seed", "batch_size", "num_samples", "world_size")}
        theirs = {k: state[k] for k in mine}
        if theirs != mine:
            raise ValueError(
                f"loader state is for {theirs}, this run has {mine}; resume with the same "
                "seed, batch size, data set size and world size"
            )
        self.epoch, self.consumed = int(state["epoch"]), int(state["consumed"])
        self._batches = None
