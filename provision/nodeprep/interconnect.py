"""``python -m nodeprep.interconnect``: all-reduce between every rank torchrun started, timed
at a few message sizes; one JSON line on each node's local rank 0.

`nodeprep verify --checks interconnect` runs it under torchrun on every selected node, inside
the trainer image, and judges the figures against its limits. NCCL where CUDA is available,
gloo otherwise. Per size: warm-up rounds, then timed rounds, each after a barrier; a round's
time is the slowest rank's (an all-reduce of MAX over the ranks' own times) and the size's
time is the median round. Bandwidths as nccl-tests defines them: the algorithm bandwidth is
bytes / time; the bus bandwidth is algbw * 2 (n - 1) / n for n ranks, the traffic each link
carries in a ring all-reduce, so that figures compare across rank counts. Both in Gbit/s.
The latency is the median time of the smallest size.

Exit codes: 0 measured (whether the figures are good is the caller's to judge), 1 the
collective failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

DEFAULT_SIZES = (4096, 1 << 20, 16 << 20)


def bus_bandwidth_gbps(nbytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algorithm bandwidth, bus bandwidth) in Gbit/s of an all-reduce of NBYTES taking
    SECONDS among RANKS ranks."""
    algbw = nbytes * 8 / seconds / 1e9
    return algbw, algbw * 2 * (ranks - 1) / ranks


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(size < 4 for size in sizes):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of byte counts of at least 4"
        )
    return sorted(set(sizes))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nodeprep.interconnect",
        description="Time all-reduce among the ranks torchrun started; print JSON on each "
        "node's local rank 0.",
    )
    add = parser.add_argument
    add("--sizes", type=_sizes, default=list(DEFAULT_SIZES), help="bytes, comma-separated")
    add("--iters", type=int, default=10, help="timed rounds per size")
    add("--warmup", type=int, default=2, help="untimed rounds per size first")
    add("--timeout-s", type=float, default=120.0, help="a collective that hangs fails after this")
    return parser


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    sizes: list[int], iters: int, warmup: int, device: torch.device
) -> list[dict[str, Any]]:
    """Every size's median slowest-rank round, and its bandwidths (see the module's text)."""
    ranks = dist.get_world_size()
    figures = []
    for size in sizes:
        buffer = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        nbytes = buffer.numel() * 4
        for _ in range(warmup):
            dist.all_reduce(buffer)
        _sync(device)
        rounds = []
        for _ in range(iters):
            dist.barrier()
            began = time.perf_counter()
            dist.all_reduce(buffer)
            _sync(device)
            rounds.append(time.perf_counter() - began)
        slowest = torch.tensor(rounds, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        seconds = statistics.median(slowest.tolist())
        algbw, busbw = bus_bandwidth_gbps(nbytes, seconds, ranks)
        figures.append({"bytes": nbytes, "time_ms": round(seconds * 1e3, 4),
                        "algbw_gbps": round(algbw, 4), "busbw_gbps": round(busbw, 4)})  # fmt: skip
    return figures


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.iters < 1 or args.warmup < 0:
        print("--iters must be at least 1 and --warmup at least 0", file=sys.stderr)
        return 2
    if "RANK" not in os.environ:
        print("run this under torchrun (it needs RANK, WORLD_SIZE and a rendezvous)",
              file=sys.stderr)  # fmt: skip
        return 2
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout_s))
    try:
        figures = measure(args.sizes, args.iters, args.warmup, device)
        ranks = dist.get_world_size()
        if local_rank == 0:
            nodes = int(os.environ.get("GROUP_WORLD_SIZE", "1"))  # torchrun's agents: nodes
            print(json.dumps({"backend": backend, "ranks": ranks, "nodes": nodes,
                              "host": socket.gethostname(), "sizes": figures,
                              "latency_ms": figures[0]["time_ms"]}), flush=True)  # fmt: skip
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
