"""Small real models and optimizers for checkpoint tests (real torch objects, no fakes)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from nodeprep.checkpoint import Checkpointer, ResumableSampler
from tmpfs import mounted_tmpfs


@dataclass
class Run:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sampler: ResumableSampler

    def extras(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler, "sampler": self.sampler}

    def train(self, steps: int) -> None:
        data = torch.arange(256 * 8, dtype=torch.float32).reshape(256, 8) / 1000
        for _ in range(steps):
            batch = data[self.sampler.next_batch()]
            batch = batch + torch.randn_like(batch) * random.uniform(0.0, 0.02)
            loss = self.model(batch).square().mean()
            self.optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            self.optimizer.step()
            self.scheduler.step()


def make_run(seed: int = 0, width: int = 16, init_seed: int | None = None) -> Run:
    """A fresh run; ``init_seed`` changes only the initial weights (not the data order)."""
    torch.manual_seed(seed if init_seed is None else init_seed)
    model = nn.Sequential(nn.Linear(8, width), nn.Dropout(0.2), nn.Linear(width, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    return Run(model, optimizer, scheduler, ResumableSampler(256, 8, seed))


def assert_same_state(left: Run, right: Run) -> None:
    for (name, a), (_, b) in zip(
        left.model.state_dict().items(), right.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    sa, sb = left.optimizer.state_dict(), right.optimizer.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    for key in sa["state"]:
        for field, value in sa["state"][key].items():
            assert torch.equal(value, sb["state"][key][field]), (key, field)
    assert left.sampler.state_dict() == right.sampler.state_dict()
    assert left.scheduler.state_dict() == right.scheduler.state_dict()


@pytest.fixture
def run() -> Run:
    return make_run()


@pytest.fixture
def checkpointer_factory(tmp_path: Path) -> Iterator[Any]:
    made: list[Checkpointer] = []

    def factory(run: Run, **kwargs: Any) -> Checkpointer:
        kwargs.setdefault("async_write", False)
        root = tmp_path / "ckpt"
        ckpt = Checkpointer(root, run.model, run.optimizer, extras=run.extras(), **kwargs)
        made.append(ckpt)
        assert ckpt.wait_for_writer()  # async saves go to the process, not inline
        return ckpt

    yield factory
    for ckpt in made:
        ckpt.close()


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 6 MiB tmpfs (root only): one ~3.6 MB full checkpoint fits, a second does not."""
    with mounted_tmpfs(tmp_path / "small", "6m") as mount_point:
        yield mount_point


def run_trainer(run_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real reference trainer to completion, as a user would, and capture its output."""
    env = dict(os.environ)
    env.update(
        NODEPREP_RUN_DIR=str(run_dir.parent / "registry"),
        PYTHONWARNINGS="ignore",
        OMP_NUM_THREADS="1",
    )
    command = [sys.executable, "-m", "nodeprep.trainer", "--run-dir", str(run_dir)]
    command += ["--threads", "1", "--device", "cpu", *args]
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300, check=False
    )
