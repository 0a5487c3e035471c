"""The few collective operations checkpointing needs; each is a no-op without a process group."""

from __future__ import annotations

import os
import pickle
from typing import Any

import torch
import torch.distributed as dist


def active() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if active() else 0


def local_rank() -> int:
    """This process's rank on its node (torchrun's LOCAL_RANK), 0 without a process group."""
    return int(os.environ.get("LOCAL_RANK", "0")) if active() else 0


def speaks_for_node(copies: str) -> bool:
    """Whether this rank writes the checkpoints (and the trainer's log lines) for where it
    runs: each node's local rank 0 when every node keeps its own copy (``copies="node"``),
    else rank 0 (one copy, and one log, on a filesystem every node shares)."""
    return (local_rank() if copies == "node" else rank()) == 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def _device() -> str:
    return "cuda" if dist.get_backend() == "nccl" else "cpu"


def _encode(obj: Any) -> torch.Tensor:
    # Pickle between the ranks of one job (trusted peers), never read from disk.
    return torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8).to(_device())


def _decode(tensor: torch.Tensor, size: int) -> Any:
    return pickle.loads(bytes(tensor[:size].cpu().tolist()))


def gather_all(obj: Any) -> list[Any]:
    """Every rank's ``obj`` on every rank (small objects only: RNG and sampler state).

    torch's own ``all_gather_object`` needs NumPy in this torch release, so the
    bytes travel as a padded uint8 tensor here.
    """
    if not active():
        return [obj]
    payload = _encode(obj)
    size = torch.tensor([payload.numel()], dtype=torch.int64, device=payload.device)
    sizes = [torch.zeros_like(size) for _ in range(world_size())]
    dist.all_gather(sizes, size)
    longest = int(max(s.item() for s in sizes))
    padded = torch.zeros(longest, dtype=torch.uint8, device=payload.device)
    padded[: payload.numel()] = payload
    chunks = [torch.empty_like(padded) for _ in range(world_size())]
    dist.all_gather(chunks, padded)
    return [_decode(c, int(s.item())) for c, s in zip(chunks, sizes, strict=True)]


def broadcast_from_zero(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if not active():
        return obj
    return gather_all(obj if rank() == 0 else None)[0]


def any_rank(flag: bool) -> bool:
    """True on every rank when ``flag`` is true on at least one."""
    if not active():
        return flag
    tensor = torch.tensor([1 if flag else 0], dtype=torch.int32, device=_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())


def barrier() -> None:
    if active():
        dist.barrier()
