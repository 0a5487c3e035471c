"""A small training script on ResumableLoader and the Checkpointer, for the SIGKILL test.

Each sample carries noise from torch's and Python's RNGs, drawn in the worker that loads it;
the model has dropout (the main process's RNG). It resumes from its newest checkpoint, saves
every 4 steps (the loader's position travels in the checkpoint's extras) and at the end
torch.saves its final state. It prints "step N" after each step.

Usage: python loader_trainer.py RUN_DIR STEPS WORKERS
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch
from torch import nn

from nodeprep.checkpoint import Checkpointer
from nodeprep.checkpoint.loader import ResumableLoader


class Noisy:
    """64 fixed points; each read adds noise from both RNGs (seeded per sample upstream)."""

    def __init__(self) -> None:
        self.points = torch.arange(64 * 4, dtype=torch.float32).reshape(64, 4) / 100

    def __len__(self) -> int:
        return len(self.points)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.points[index] + torch.randn(4) * 0.01 + random.random() * 0.01


def main() -> int:
    run_dir, steps, workers = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.2), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = ResumableLoader(Noisy(), batch_size=6, seed=11, num_workers=workers)
    ckpt = Checkpointer(run_dir / "ckpt", model, optimizer, extras={"loader": loader},
                        async_write=False, keep=2)  # fmt: skip
    step = ckpt.restore() or 0
    try:
        while step < steps:
            loss = model(loader.next_batch()).square().mean()
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            step += 1
            if step % 4 == 0:
                ckpt.save(step)
            print(f"step {step}", flush=True)
        torch.save({"model": model.state_dict(), "loader": loader.state_dict()},
                   run_dir / "final.pt")  # fmt: skip
    finally:
        ckpt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
