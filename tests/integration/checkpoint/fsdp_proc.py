"""A small FSDP2 training job for the sharded checkpoint tests: run it under torchrun (gloo, CPU).

Every rank's parameters and optimizer moments are DTensors sharded over a CPU device mesh
(``fully_shard``), checkpointed with ``ShardedCheckpointer``. Batches come from (seed, step,
rank) and dropout draws from each rank's own generator, so a resumed run is bit-exact with an
uninterrupted one only if the shards, the optimizer state and every RNG came back.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from nodeprep.checkpoint import ShardedCheckpointer


def _local(value: object) -> object:
    if isinstance(value, DTensor):
        return value.to_local().clone()
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {str(k): _local(v) for k, v in value.items()}
    return value


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(args.seed)  # the same initial weights on every rank, then sharded
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8),
    )  # fmt: skip
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(args.seed * 1000 + rank)  # each rank's own dropout stream
    ckpt = ShardedCheckpointer(args.run_dir / "ckpt", model, optimizer, keep=2)
    ckpt.wait_for_writer()
    try:
        step = ckpt.restore() or 0
        print(f"start step={step} resumed={step > 0}", flush=True)
        saved_full = -1
        while step < args.steps:
            gen = torch.Generator().manual_seed(args.seed * 100_000 + step * 10 + rank)
            inputs = torch.randn(16, 32, generator=gen)
            labels = torch.randint(0, 8, (16,), generator=gen)
            loss = torch.nn.functional.cross_entropy(model(inputs), labels)
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            step += 1
            print(f"step {step} loss={loss.item():.6f}", flush=True)
            ckpt.poll()
            if step % args.every == 0:
                layer = "full" if (step // args.every) % 2 == 0 else "light"
                ckpt.save(step, layer)
                saved_full = step if layer == "full" else saved_full
        if saved_full != step:
            ckpt.save(step, "full")
        ckpt.ensure_durable(step)
    finally:
        ckpt.close()
    state = {"model": _local(model.state_dict()), "optim": _local(optimizer.state_dict()["state"]),
             "rng": torch.get_rng_state()}  # fmt: skip
    torch.save(state, args.out.with_name(f"{args.out.name}.rank{rank}"))
    print(f"done step={step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
