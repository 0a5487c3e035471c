"""Checkpoint benchmark: five ways of saving side by side, the disk's limit, recovery, kills.

Usage: python benchmarks/checkpoint.py [--quick] [--dir DIR] [--kills N]

All savers run in one process on the same model and disk, interleaved block by block, so
their figures are comparable; medians are quoted. Between rounds, ``dd conv=fsync`` samples
the disk's sequential write rate: the limit the background write is held against. DCP's
process mode needs NumPy (``pip install -e '.[bench]'``); without it that saver is left out
and the run says so. The last line is JSON.
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
from checkpoint_recovery import recovery
from checkpoint_recovery import summary as recovery_summary
from checkpoint_savers import (
    SAVERS,
    Record,
    clean,
    process_mode_available,
    start_single_process_group,
    training,
)
from nodeprep.checkpoint import commit_checkpoint
from nodeprep.checkpoint.snapshot import StagingArea, flatten, unflatten
from nodeprep.trainer.model import build_model

QUICK = {"model_mb": 16.0, "every": 20, "blocks": 2, "kills": 5, "recoveries": 2}
FULL = {"model_mb": 110.0, "every": 50, "blocks": 4, "kills": 200, "recoveries": 5}


def interleaved(
    base: Path, model_mb: float, blocks: int, every: int, modes: list[str]
) -> dict[str, Any]:
    """One model trained in blocks of ``every`` steps, each block ending in one saver's save.

    Savers take turns block by block so that the machine's load drifts over all of them
    alike; each round starts one saver later than the one before. A block's step times are
    charged to the save that ended the block before it: that is when a background writer
    competes for the CPU. After each round, once every write in flight has ended, one
    ``dd`` sample; the block after it is charged to nobody.
    """
    model, optimizer, forward_backward = training(model_mb)

    def step() -> None:
        forward_backward()
        optimizer.step()

    for _ in range(3):  # optimizer state exists before the first save
        step()
    savers = {mode: SAVERS[mode](base / mode, model, optimizer) for mode in modes}
    step_times: dict[str, list[float]] = {mode: [] for mode in modes}
    stalls: dict[str, list[float]] = {mode: [] for mode in modes}
    dd_rates: list[float] = []
    checkpoint_mb = 0.0
    previous: str | None = "off"  # the saver whose write the next block overlaps
    for block in range(blocks * len(modes)):
        for _ in range(every):
            begin = time.perf_counter()
            step()
            if previous is not None:
                step_times[previous].append(time.perf_counter() - begin)
        turn, position = divmod(block, len(modes))
        mode = modes[(position + turn) % len(modes)]  # each round starts one saver later
        stalls[mode].append(savers[mode].save(block * every))
        previous = mode
        if block % len(modes) == len(modes) - 1:
            if not checkpoint_mb:
                checkpoint_mb = (
                    sum(
                        t.numel() * t.element_size()
                        for t in [*model.state_dict().values(), *_optimizer_tensors(optimizer)]
                    )
                    / 1e6
                )
            for saver in savers.values():
                saver.quiesce()
            dd_rates.append(dd_mb_s(base, max(64, int(checkpoint_mb))))
            previous = None  # the last save's write is over: the next block is nobody's
    records = {mode: saver.finish() for mode, saver in savers.items()}
    for mode in modes:
        clean(base / mode)
    return {"step_times": step_times, "stalls": stalls, "records": records, "dd": dd_rates}


def writer_alone(base: Path, model_mb: float, repeats: int) -> tuple[float, float]:
    """The write path with the CPU to itself: a full checkpoint's tensors staged in shared
    memory (as the async writer gets them) committed with nothing else running, each sample
    beside a dd sample. Returns the medians (ours MB/s, dd MB/s)."""
    torch.manual_seed(0)
    model = build_model(model_mb)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for param in model.parameters():
        param.grad = torch.zeros_like(param)
    optimizer.step()  # Adam's moments exist
    tensors: list[torch.Tensor] = []
    skeleton = flatten({"model.pt": model.state_dict(), "optimizer.pt": optimizer.state_dict(),
                        "train.pt": {"step": 1}}, tensors)  # fmt: skip
    payloads = unflatten(skeleton, StagingArea().copy_in(tensors))
    ours: list[float] = []
    disk: list[float] = []
    for index in range(repeats):
        started = time.perf_counter()
        path = commit_checkpoint(base / "alone", index + 1, "full", payloads)
        elapsed = time.perf_counter() - started
        ours.append(sum(p.stat().st_size for p in path.iterdir()) / elapsed / 1e6)
        clean(base / "alone")
        disk.append(dd_mb_s(base, int(ours[-1] * elapsed)))
    print(f"writer alone: {[round(r) for r in ours]} MB/s, dd beside it {[round(r) for r in disk]}")
    return statistics.median(ours), statistics.median(disk)


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v for s in optimizer.state_dict()["state"].values() for v in s.values()
            if isinstance(v, torch.Tensor)]  # fmt: skip


def dd_mb_s(directory: Path, megabytes: int) -> float:
    """One ``dd conv=fsync`` sample: the sequential write rate of the checkpoints' disk."""
    target = directory / "dd.bin"
    count = max(1, megabytes // 8)
    started = time.perf_counter()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", "bs=8M", f"count={count}", "conv=fsync"],
        check=True, capture_output=True,
    )  # fmt: skip
    rate = count * 8 * (1 << 20) / 1e6 / (time.perf_counter() - started)
    target.unlink()
    print(f"dd conv=fsync {count * 8} MiB: {rate:.0f} MB/s", flush=True)
    return rate


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def report(measured: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per saver: blocked per save, step overhead after it, time to durable, write rate."""
    base_step = statistics.median(measured["step_times"]["off"])
    table: dict[str, dict[str, float | None]] = {}
    for mode, records in measured["records"].items():
        recs: list[Record] = records
        durable = [r.durable_s for r in recs if r.durable_s is not None]
        # Background bytes per second: from the end of the blocking part to durable.
        rates = [r.nbytes / (r.durable_s - r.blocked_s) / 1e6 for r in recs
                 if r.durable_s is not None and r.durable_s > r.blocked_s]  # fmt: skip
        writer = [r.nbytes / r.write_s / 1e6 for r in recs if r.write_s]
        table[mode] = {
            "blocked_ms": (_median(measured["stalls"][mode]) or 0) * 1000,
            "step_overhead_pct": (statistics.median(measured["step_times"][mode]) / base_step - 1)
            * 100,
            "durable_s": _median(durable),
            "background_mb_s": _median(rates),
            "writer_mb_s": _median(writer),
            "mb": _median([r.nbytes / 1e6 for r in recs]),
        }
    print(f"median step with no save: {base_step * 1000:.1f} ms")
    print(f"{'saver':<18} {'blocked ms':>10} {'step +%':>8} {'durable s':>9} {'bg MB/s':>8} "
          f"{'writer MB/s':>11} {'MB':>6}")  # fmt: skip
    for mode, row in table.items():
        widths = {"blocked_ms": 10, "step_overhead_pct": 8, "durable_s": 9,
                  "background_mb_s": 8, "writer_mb_s": 11, "mb": 6}  # fmt: skip
        cells = [_cell(row[key], width) for key, width in widths.items()]
        print(f"{mode:<18} {' '.join(cells)}")
    return table


def _cell(value: float | None, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small model, few kills")
    parser.add_argument("--dir", type=Path, help="where to write (default: a temporary dir)")
    parser.add_argument("--kills", type=int, help="SIGKILLs in the kill campaign (0: none)")
    args = parser.parse_args()
    conf = QUICK if args.quick else FULL
    base = args.dir or Path(tempfile.mkdtemp(prefix="nodeprep-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    modes = list(SAVERS)
    why_not = process_mode_available()
    if why_not:
        modes.remove("dcp_async_process")
        print(f"dcp_async_process left out: {why_not}", flush=True)
    start_single_process_group()
    measured = interleaved(base, float(conf["model_mb"]), int(conf["blocks"]), int(conf["every"]),
                           modes)  # fmt: skip
    table = report(measured)
    dd = statistics.median(measured["dd"])
    ours = table["nodeprep_async"]
    print(f"dd conv=fsync median of {len(measured['dd'])}: {dd:.0f} MB/s; ours reaches "
          f"{(ours['background_mb_s'] or 0) / dd * 100:.0f} % of it from save to durable, "
          f"{(ours['writer_mb_s'] or 0) / dd * 100:.0f} % in the writer's own time")  # fmt: skip
    summary: dict[str, Any] = {
        "stall_pct_of_step": round(
            ours["blocked_ms"] / 1000 / int(conf["every"])
            / statistics.median(measured["step_times"]["off"]) * 100, 3),
        "write_mb_s": round(ours["background_mb_s"] or 0, 1),
        "writer_mb_s": round(ours["writer_mb_s"] or 0, 1),
        "disk_mb_s": round(dd, 1),
        "write_vs_disk_ratio": round((ours["background_mb_s"] or 0) / dd, 3),
        "durable_s": round(ours["durable_s"] or 0, 2),
        "step_overhead_pct": round(ours["step_overhead_pct"] or 0, 2),
    }  # fmt: skip
    for other in modes[2:]:
        summary[f"stall_vs_{other}_ratio"] = round(
            ours["blocked_ms"] / (table[other]["blocked_ms"] or 1), 3)  # fmt: skip
        durable = table[other]["durable_s"]
        if durable:
            summary[f"durable_vs_{other}_ratio"] = round((ours["durable_s"] or 0) / durable, 3)
    alone, alone_dd = writer_alone(base, float(conf["model_mb"]), 5)
    summary.update(alone_mb_s=round(alone, 1), alone_disk_mb_s=round(alone_dd, 1),
                   alone_vs_disk_ratio=round(alone / alone_dd, 3))  # fmt: skip
    summary.update(recovery_summary(
        recovery(base / "recovery", float(conf["model_mb"]), int(conf["recoveries"]))))  # fmt: skip
    kills_wanted = int(conf["kills"]) if args.kills is None else args.kills
    if kills_wanted > 0:
        kills, exact = campaign(kills_wanted, base / "kills")
        summary.update(kill_trials=kills, kill_trials_bit_exact=exact)
    print(f"checkpoint size {ours['mb']:.0f} MB; medians from one run on this machine")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
