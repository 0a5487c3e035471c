"""One sha256 over model, optimizer, sampler and RNG state, to compare runs bit for bit."""

from __future__ import annotations

import ctypes
import hashlib
from typing import Any

import torch

from nodeprep.checkpoint import rng
from nodeprep.checkpoint.snapshot import flatten


def final_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, extras: dict[str, Any]
) -> dict[str, Any]:
    """Everything a resumed run must reproduce exactly, as plain containers and CPU tensors."""
    return {
        "model": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
        "optimizer": optimizer.state_dict(),
        "extras": {name: c.state_dict() for name, c in extras.items()},
        "rng": rng.capture(),
    }


def state_hash(state: dict[str, Any]) -> str:
    """sha256 of the structure (with tensor positions) and every tensor's dtype, shape and bytes."""
    tensors: list[torch.Tensor] = []
    skeleton = flatten(state, tensors)
    digest = hashlib.sha256(repr(skeleton).encode())
    for tensor in tensors:
        cpu = tensor.detach().cpu().contiguous()
        digest.update(f"{cpu.dtype}{tuple(cpu.shape)}".encode())
        digest.update(ctypes.string_at(cpu.data_ptr(), cpu.numel() * cpu.element_size()))
    return digest.hexdigest()
