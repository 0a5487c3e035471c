"""Where a save's stall ends on a CPU: the copy into staging, in the step or beside it.

Usage: python benchmarks/checkpoint_overlap.py [--quick] [--rounds N]

One model (the reference trainer's, 110 MiB, AdamW), three kinds of step taken in turn, round
by round, so that the machine's drift falls on all three alike:

- ``plain``: forward, backward, optimizer step;
- ``sync``: the copy into the shared-memory staging buffers first (what ``Checkpointer.save``
  blocks for), then the step;
- ``overlap``: the same copy on a thread that runs beside forward and backward and is joined
  before the optimizer step (the first thing that changes what is copied).

The overlap blocks the loop only for the join. Whether it saves anything is the step's own
time: ``overlap_extra_ms`` (its median step minus the plain one) against ``sync_extra_ms``.
Where the copy is a CPU memcpy on the cores the model trains on, the overlap costs as much or
more: the copy's cost moves from the save into the step beside it, and a benchmark that
counts only the blocked time would call that a gain. Where the copy is a DMA from GPU
memory, it is not. Medians; the last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from typing import Any

import torch

from checkpoint_savers import training
from nodeprep.checkpoint.snapshot import StagingArea

KINDS = ("plain", "sync", "overlap")


def measure(model_mb: float, rounds: int) -> dict[str, Any]:
    model, optimizer, forward_backward = training(model_mb)
    for _ in range(3):  # Adam's moments exist; the first steps' allocations are behind us
        forward_backward()
        optimizer.step()
    tensors = [*model.state_dict().values()] + [
        value
        for state in optimizer.state_dict()["state"].values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    ]
    staging = StagingArea()
    staging.copy_in(tensors)  # the buffers exist, as after a run's first save
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    steps: dict[str, list[float]] = {kind: [] for kind in KINDS}
    copies: dict[str, list[float]] = {"sync": [], "overlap": []}
    joins: list[float] = []

    def copy(kind: str) -> None:
        began = time.perf_counter()
        staging.copy_in(tensors)
        copies[kind].append(time.perf_counter() - began)

    for index in range(rounds * len(KINDS)):
        turn, position = divmod(index, len(KINDS))
        kind = KINDS[(position + turn) % len(KINDS)]  # each round starts one kind later
        began = time.perf_counter()
        helper = None
        if kind == "sync":
            copy(kind)
        elif kind == "overlap":
            helper = threading.Thread(target=copy, args=(kind,))
            helper.start()
        forward_backward()
        if helper is not None:
            waited = time.perf_counter()
            helper.join()
            joins.append(time.perf_counter() - waited)
        optimizer.step()
        steps[kind].append(time.perf_counter() - began)
    return {"steps": steps, "copies": copies, "joins": joins, "nbytes": nbytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="16 MiB model, 5 rounds")
    parser.add_argument("--rounds", type=int, help="steps of each kind (default 15)")
    args = parser.parse_args()
    model_mb = 16.0 if args.quick else 110.0
    rounds = args.rounds or (5 if args.quick else 15)
    found = measure(model_mb, rounds)
    ms = {kind: statistics.median(values) * 1000 for kind, values in found["steps"].items()}
    copy_ms = statistics.median(found["copies"]["sync"]) * 1000
    beside_ms = statistics.median(found["copies"]["overlap"]) * 1000
    summary = {
        "model_mb": model_mb,
        "rounds": rounds,
        "staged_mb": round(found["nbytes"] / 1e6, 1),
        "plain_step_ms": round(ms["plain"], 1),
        "sync_extra_ms": round(ms["sync"] - ms["plain"], 1),
        "overlap_extra_ms": round(ms["overlap"] - ms["plain"], 1),
        "overlap_blocked_ms": round(statistics.median(found["joins"]) * 1000, 2),
        "copy_ms": round(copy_ms, 1),
        "copy_gb_s": round(found["nbytes"] / copy_ms / 1e6, 1),
        "overlap_copy_ms": round(beside_ms, 1),
    }
    for kind in KINDS:
        print(f"{kind:<8} median step {ms[kind]:7.1f} ms over {len(found['steps'][kind])}")
    print(
        f"copy of {summary['staged_mb']} MB: median {copy_ms:.1f} ms in the step "
        f"({summary['copy_gb_s']} GB/s), {beside_ms:.1f} ms beside it; the overlap blocked for "
        f"{summary['overlap_blocked_ms']} ms at the join"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
