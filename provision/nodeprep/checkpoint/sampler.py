"""A shuffling, sharding sampler that can say exactly where it is and resume there.

``torch.utils.data`` samplers have no state: after a restart the loader
would replay the epoch from its first batch. This one derives each epoch's
permutation from (seed, epoch) alone, so its whole state is two integers and
the batch after a resume is the batch that would have come.
"""

from __future__ import annotations

from typing import Any

import torch


class ResumableSampler:
    """Yields batches of indices for one rank; ``state_dict`` is (epoch, batches consumed)."""

    def __init__(
        self, num_samples: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1
    ) -> None:
        if num_samples < batch_size * world_size:
            raise ValueError(
                f"{num_samples} samples cannot fill one batch of {batch_size} on "
                f"{world_size} rank(s); use more samples or a smaller batch"
            )
        self.num_samples, self.batch_size, self.seed = num_samples, batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(0)

    @property
    def batches_per_epoch(self) -> int:
        return self.num_samples // (self.batch_size * self.world_size)

    def next_batch(self) -> torch.Tensor:
        """The next batch of sample indices for this rank, moving to a new epoch when due."""
        if self.position >= self.batches_per_epoch:
            self.epoch += 1
            self.position = 0
            self._order = self._permutation(self.epoch)
        start = (self.position * self.world_size + self.rank) * self.batch_size
        self.position += 1
        return self._order[start : start + self.batch_size]

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "rank": self.rank,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (state["seed"], state["world_size"]) != (self.seed, self.world_size):
            raise ValueError(
                f"sampler state is for seed {state['seed']} on {state['world_size']} rank(s), "
                f"this run has seed {self.seed} on {self.world_size}; resume with the same ones"
            )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation(self.epoch)

    def _permutation(self, epoch: int) -> torch.Tensor:
        return epoch_permutation(self.num_samples, self.seed, epoch)


def epoch_permutation(num_samples: int, seed: int, epoch: int) -> torch.Tensor:
    """The epoch's order of every sample, from (seed, epoch) alone; ranks take slices of it."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_samples, generator=generator)
