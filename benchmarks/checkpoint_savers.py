"""The ways of checkpointing that benchmarks/checkpoint.py compares on one model, side by side.

Each saver is told to save at a step and returns the seconds the training loop was
blocked; ``finish()`` gives one record per save: blocked seconds, seconds from the call
to durable on disk (None where nothing makes it durable), and bytes written.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from nodeprep.checkpoint import Checkpointer, ResumableSampler, SaveHandle
from nodeprep.trainer.model import SyntheticData, build_model


def training(
    model_mb: float,
) -> tuple[torch.nn.Module, torch.optim.Optimizer, Callable[[], None]]:
    """The benchmarks' model (seeded), its AdamW, and forward + backward on its next batch
    (the caller takes the optimizer step)."""
    torch.manual_seed(0)
    model = build_model(model_mb)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = SyntheticData(4096, 0)
    sampler = ResumableSampler(4096, 32, 0)

    def forward_backward() -> None:
        inputs, labels = data.batch(sampler.next_batch(), torch.device("cpu"))
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), labels).backward()  # type: ignore[no-untyped-call]

    return model, optimizer, forward_backward


@dataclass
class Record:
    blocked_s: float
    durable_s: float | None  # from the call to durable (fsynced, committed); None: never
    nbytes: int
    write_s: float | None = None  # the writer's own time for the bytes (ours only)


class Saver:
    def save(self, step: int) -> float:
        raise NotImplementedError

    def quiesce(self) -> None:
        """Wait for any write in flight (so that a dd sample has the disk to itself)."""

    def finish(self) -> list[Record]:
        return []


class Off(Saver):
    def save(self, step: int) -> float:
        return 0.0


class Ours(Saver):
    """nodeprep's async writer: blocked time is the snapshot copy (plus any wait)."""

    def __init__(self, root: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.ckpt = Checkpointer(root, model, optimizer, keep=2, async_write=True)
        self.ckpt.wait_for_writer()  # measure the writer process, not its start-up's inline saves
        self.saves: list[tuple[float, SaveHandle]] = []

    def save(self, step: int) -> float:
        called = time.time()
        handle = self.ckpt.save(step)
        self.saves.append((called, handle))
        return handle.blocked_s

    def quiesce(self) -> None:
        if self.saves:
            self.saves[-1][1].wait()

    def finish(self) -> list[Record]:
        records = []
        for called, handle in self.saves:
            result = handle.wait()
            if result is None or result.error is not None:
                raise RuntimeError(f"a benchmark save failed: {result}")
            records.append(
                Record(handle.blocked_s, result.committed_time - called, result.nbytes,
                       result.write_seconds)
            )  # fmt: skip
        self.ckpt.close()
        return records


class TorchSave(Saver):
    """The common baseline: torch.save of both state dicts in the training loop (no fsync)."""

    def __init__(self, root: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.root, self.model, self.optimizer = root, model, optimizer
        root.mkdir(parents=True, exist_ok=True)
        self.records: list[Record] = []

    def save(self, step: int) -> float:
        started = time.perf_counter()
        path = self.root / f"step{step}.pt"
        torch.save(
            {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, path
        )
        blocked = time.perf_counter() - started
        self.records.append(Record(blocked, None, path.stat().st_size))
        path.unlink()
        return blocked


class Dcp(Saver):
    """torch.distributed.checkpoint.async_save; one save in flight, like ours."""

    def __init__(
        self, root: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, process: bool
    ):
        self.root, self.model, self.optimizer, self.process = root, model, optimizer, process
        self.pending: list[tuple[int, Future[Any], float, float]] = []
        self.records: list[Record] = []
        self.done_at: dict[int, float] = {}

    def _collect(self) -> None:
        while self.pending:
            step, future, called, blocked = self.pending.pop()
            future.result()
            # result() may return before the done callbacks ran: then now is close enough.
            done = self.done_at.get(step, time.time())
            path = self.root / f"step{step}"
            nbytes = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
            self.records.append(Record(blocked, done - called, nbytes))
            shutil.rmtree(path)

    def save(self, step: int) -> float:
        called = time.time()
        started = time.perf_counter()
        self._collect()
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        kwargs: dict[str, Any] = {}
        if self.process:
            from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

            kwargs["async_checkpointer_type"] = AsyncCheckpointerType.PROCESS
        else:
            kwargs["no_dist"] = True
        future = dcp.async_save(state, checkpoint_id=str(self.root / f"step{step}"), **kwargs)
        future.add_done_callback(lambda _: self.done_at.__setitem__(step, time.time()))
        blocked = time.perf_counter() - started
        self.pending.append((step, future, called, blocked))
        return blocked

    def quiesce(self) -> None:
        self._collect()

    def finish(self) -> list[Record]:
        self._collect()
        return self.records


def start_single_process_group() -> None:
    """DCP's process mode needs a process group: one rank over gloo, on 127.0.0.1 only."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"  # its daemon's store, otherwise on the host name
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{port}")


def process_mode_available() -> str | None:
    """Why DCP's process mode cannot run here, or None (it pickles through NumPy)."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        return "NumPy is not installed (pip install -e '.[bench]')"
    return None


Factory = Callable[[Path, torch.nn.Module, torch.optim.Optimizer], Saver]

SAVERS: dict[str, Factory] = {
    "off": lambda root, model, optimizer: Off(),
    "nodeprep_async": Ours,
    "torch_save": TorchSave,
    "dcp_async_thread": lambda root, model, opt: Dcp(root, model, opt, process=False),
    "dcp_async_process": lambda root, model, opt: Dcp(root, model, opt, process=True),
}


def clean(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
