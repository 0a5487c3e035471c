"""Copying training state to host memory fast, in a form another process can read.

A state dict is split into a skeleton (plain containers, tensors replaced by
an index) and a flat list of tensors. The tensors are copied into staging
buffers in shared memory that are allocated once and reused, so the training
loop pays one memcpy per checkpoint and the writer process reads the very
same pages without a pickle round-trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class TensorRef:
    """Placeholder for the tensor at ``index`` in the flat list."""

    index: int


def flatten(obj: Any, out: list[torch.Tensor]) -> Any:
    """Return the skeleton of ``obj``, appending its tensors to ``out`` in a stable order."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
        return TensorRef(len(out) - 1)
    if isinstance(obj, dict):
        return {key: flatten(value, out) for key, value in obj.items()}
    if isinstance(obj, list):
        return [flatten(value, out) for value in obj]
    if isinstance(obj, tuple):
        return tuple(flatten(value, out) for value in obj)
    return obj


def unflatten(skeleton: Any, tensors: list[torch.Tensor]) -> Any:
    """Rebuild the structure ``flatten`` produced, with ``tensors`` in place of the refs."""
    if isinstance(skeleton, TensorRef):
        return tensors[skeleton.index]
    if isinstance(skeleton, dict):
        return {key: unflatten(value, tensors) for key, value in skeleton.items()}
    if isinstance(skeleton, list):
        return [unflatten(value, tensors) for value in skeleton]
    if isinstance(skeleton, tuple):
        return tuple(unflatten(value, tensors) for value in skeleton)
    return skeleton


class StagingArea:
    """Shared-memory host buffers matching the tensors of the last snapshot; reused if they fit."""

    def __init__(self) -> None:
        self.buffers: list[torch.Tensor] = []
        self.generation = 0

    def copy_in(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Copy ``tensors`` into the staging buffers (reallocating only on a layout change)."""
        if not self._fits(tensors):
            self.buffers = [_shared_empty(t) for t in tensors]
            self.generation += 1
        with torch.no_grad():
            for buffer, tensor in zip(self.buffers, tensors, strict=True):
                buffer.copy_(tensor.detach())
        if any(t.is_cuda for t in tensors):
            torch.cuda.synchronize()
        return self.buffers

    def _fits(self, tensors: list[torch.Tensor]) -> bool:
        return len(tensors) == len(self.buffers) and all(
            b.shape == t.shape and b.dtype == t.dtype
            for b, t in zip(self.buffers, tensors, strict=True)
        )


def _shared_empty(like: torch.Tensor) -> torch.Tensor:
    buffer = torch.empty(like.shape, dtype=like.dtype, device="cpu")
    buffer.share_memory_()  # type: ignore[no-untyped-call]
    return buffer
