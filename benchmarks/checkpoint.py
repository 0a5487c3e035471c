"""Checkpoint benchmark: step-time stall of four ways of saving, disk bandwidth, kill/resume.

Usage: python benchmarks/checkpoint.py [--quick] [--dir DIR]

All modes run in one process on the same model and disk, interleaved, so
their figures are comparable; medians are quoted. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from checkpoint_kills import campaign
from checkpoint_savers import SAVERS, clean
from nodeprep.checkpoint import ResumableSampler
from nodeprep.trainer.model import SyntheticData, build_model

QUICK = {"model_mb": 16.0, "every": 50, "blocks": 2, "kills": 5}
FULL = {"model_mb": 110.0, "every": 50, "blocks": 4, "kills": 200}


def interleaved(base: Path, model_mb: float, blocks: int, every: int) -> dict[str, Any]:
    """One model trained in blocks of ``every`` steps, each block ending in one mode's save.

    Modes take turns block by block so that the machine's load drifts over all
    of them alike. A block's step times are charged to the save that ended the
    block before it: that is when an async writer competes for the CPU.
    """
    torch.manual_seed(0)
    model = build_model(model_mb)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = SyntheticData(4096, 0)
    sampler = ResumableSampler(4096, 32, 0)

    def step() -> None:
        inputs, labels = data.batch(sampler.next_batch(), torch.device("cpu"))
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), labels).backward()  # type: ignore[no-untyped-call]
        optimizer.step()

    for _ in range(3):  # optimizer state exists before the first save
        step()
    savers = {mode: make(base / mode, model, optimizer) for mode, make in SAVERS.items()}
    modes = list(SAVERS)
    step_times: dict[str, list[float]] = {mode: [] for mode in modes}
    stalls: dict[str, list[float]] = {mode: [] for mode in modes}
    previous = "off"
    for block in range(blocks * len(modes)):
        for _ in range(every):
            begin = time.perf_counter()
            step()
            step_times[previous].append(time.perf_counter() - begin)
        mode = modes[block % len(modes)]
        stalls[mode].append(savers[mode][0](block * every))
        previous = mode
    results = {mode: saver[1]() for mode, saver in savers.items()}
    for mode in modes:
        clean(base / mode)
    return {"step_times": step_times, "stalls": stalls, "results": results}


def disk_mb_s(directory: Path, megabytes: int, repeats: int = 3) -> float:
    """dd with conv=fsync: sequential write bandwidth of the disk the checkpoints go to (median)."""
    target = directory / "dd.bin"
    count = max(1, megabytes // 8)
    rates: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={target}", "bs=8M", f"count={count}", "conv=fsync"],
            check=True, capture_output=True,
        )  # fmt: skip
        rates.append(count * 8 * (1 << 20) / 1e6 / (time.perf_counter() - started))
        target.unlink()
    print(f"dd conv=fsync {count * 8} MiB: {[round(r) for r in rates]} MB/s", flush=True)
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small model, few kills")
    parser.add_argument("--dir", type=Path, help="where to write (default: a temporary dir)")
    args = parser.parse_args()
    conf = QUICK if args.quick else FULL
    base = args.dir or Path(tempfile.mkdtemp(prefix="nodeprep-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    measured = interleaved(base, float(conf["model_mb"]), int(conf["blocks"]), int(conf["every"]))
    for mode in SAVERS:
        times, stalls = measured["step_times"][mode], measured["stalls"][mode]
        print(
            f"{mode}: median step {statistics.median(times) * 1000:.1f} ms after its saves, "
            f"blocked per save median {statistics.median(stalls) * 1000:.1f} ms "
            f"(all: {[round(x * 1000, 1) for x in stalls]} ms)",
            flush=True,
        )
    summary = summarize(measured, int(conf["every"]))
    ckpt_mb = summary.pop("checkpoint_mb")
    summary["disk_mb_s"] = round(disk_mb_s(base, max(64, int(ckpt_mb))), 1)
    kills, exact = campaign(int(conf["kills"]), base / "kills")
    summary.update(kill_trials=kills, kill_trials_bit_exact=exact)
    print(
        f"checkpoint size {ckpt_mb:.0f} MB; figures are medians from one run on a shared, "
        "noisy 2-core machine"
    )
    print(json.dumps(summary))


def summarize(measured: dict[str, Any], every: int) -> dict[str, Any]:
    step_times, stalls = measured["step_times"], measured["stalls"]
    base_step = statistics.median(step_times["off"])
    ours = statistics.median(stalls["nodeprep_async"])
    results = measured["results"]["nodeprep_async"]
    write = statistics.median(r.nbytes / r.write_seconds / 1e6 for r in results)
    slowdown = statistics.median(step_times["nodeprep_async"]) / base_step - 1
    print(
        f"step time after an async save vs no save: {slowdown * 100:+.1f} % "
        "(the writer process competing for the CPU)"
    )
    return {
        "stall_pct_of_step": round(ours / every / base_step * 100, 3),
        "stall_vs_dcp_ratio": round(ours / statistics.median(stalls["dcp_async_save"]), 3),
        "stall_vs_torch_save_ratio": round(ours / statistics.median(stalls["torch_save"]), 3),
        "write_mb_s": round(write, 1),
        "checkpoint_mb": statistics.median(r.nbytes / 1e6 for r in results),
    }


if __name__ == "__main__":
    main()
