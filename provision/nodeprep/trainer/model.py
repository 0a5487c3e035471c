"""A small model and its data: a synthetic set derived from the seed alone, or any tensors.

Dropout and input noise (drawn from Python's ``random`` and torch's RNG) are
there on purpose: a resume that forgot an RNG state would diverge at once.
"""

from __future__ import annotations

import math
import random

import torch
from torch import nn

INPUT_DIM = 64
CLASSES = 10
DEPTH = 4


def hidden_width(model_mb: float) -> int:
    """The hidden width that makes a DEPTH-layer MLP about ``model_mb`` MiB of float32.

    The DEPTH - 2 square hidden layers hold nearly all the parameters.
    """
    params = model_mb * (1 << 20) / 4
    return max(16, int(math.sqrt(params / (DEPTH - 2))))


def build_model(model_mb: float) -> nn.Module:
    width = hidden_width(model_mb)
    layers: list[nn.Module] = [nn.Linear(INPUT_DIM, width), nn.ReLU(), nn.Dropout(0.1)]
    for _ in range(DEPTH - 2):
        layers += [nn.Linear(width, width), nn.ReLU(), nn.Dropout(0.1)]
    layers.append(nn.Linear(width, CLASSES))
    return nn.Sequential(*layers)


class TensorData:
    """A classification set held as tensors; batches and samples get a little noise whose
    size and values use every RNG."""

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor) -> None:
        self.inputs, self.labels = inputs, labels

    def __len__(self) -> int:
        return len(self.labels)

    def batch(
        self, indices: torch.Tensor, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch at ``indices`` with its noise."""
        scale = random.uniform(0.0, 0.05)
        inputs = self.inputs[indices]
        inputs = inputs + scale * torch.randn_like(inputs)
        return inputs.to(device), self.labels[indices].to(device)


class SyntheticData(TensorData):
    """A fixed classification set: inputs from N(0, 1), labels from a hidden linear teacher."""

    def __init__(self, num_samples: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        inputs = torch.randn(num_samples, INPUT_DIM, generator=generator)
        teacher = torch.randn(INPUT_DIM, CLASSES, generator=generator)
        super().__init__(inputs, (inputs @ teacher).argmax(dim=1))


class Samples:
    """A set one sample at a time, for a DataLoader: each sample draws its own noise.

    Under ``ResumableLoader`` the draws are seeded per batch in whichever worker loads it.
    """

    def __init__(self, data: TensorData) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        scale = random.uniform(0.0, 0.05)
        inputs = self.data.inputs[index]
        return inputs + scale * torch.randn_like(inputs), self.data.labels[index]
