"""The four ways of checkpointing that benchmarks/checkpoint.py compares on one model."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp

from nodeprep.checkpoint import Checkpointer, SaveResult

Saver = tuple[Callable[[int], float], Callable[[], list[SaveResult]]]


def no_saver(root: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Saver:
    del root, model, optimizer
    return (lambda step: 0.0), list


def ours(root: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Saver:
    """nodeprep's async writer: blocked time is the snapshot copy (plus any wait)."""
    ckpt = Checkpointer(root, model, optimizer, keep=2, async_write=True)
    ckpt.wait_for_writer()  # measure the writer process, not the inline saves of its start-up

    def finish() -> list[SaveResult]:
        ckpt.close()
        return list(ckpt.history)

    return ckpt.save, finish


def plain_torch_save(root: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Saver:
    """The common baseline: torch.save of both state dicts in the training loop (no fsync)."""
    root.mkdir(parents=True, exist_ok=True)

    def save(step: int) -> float:
        started = time.perf_counter()
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        torch.save(state, root / f"step{step}.pt")
        return time.perf_counter() - started

    return save, list


def dcp_async(root: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Saver:
    """torch.distributed.checkpoint.async_save; one save in flight, like ours."""
    pending: list[Any] = []

    def save(step: int) -> float:
        started = time.perf_counter()
        if pending:
            pending.pop().result()
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        pending.append(dcp.async_save(state, checkpoint_id=str(root / f"step{step}"), no_dist=True))
        return time.perf_counter() - started

    def finish() -> list[SaveResult]:
        if pending:
            pending.pop().result()
        return []

    return save, finish


SAVERS: dict[str, Callable[[Path, torch.nn.Module, torch.optim.Optimizer], Saver]] = {
    "off": no_saver,
    "nodeprep_async": ours,
    "torch_save": plain_torch_save,
    "dcp_async_save": dcp_async,
}


def clean(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
