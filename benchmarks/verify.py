"""`nodeprep verify` on provisioned nodes, the linear strategy against `--fast`, side by side.

The runs alternate (linear, fast, linear, fast, ...) on the same nodes, so both modes see the
same load; each figure is the median of its mode's runs, from the command line as a user
runs it. Verify changes nothing on a node, so the runs do not disturb one another.

    .venv/bin/python benchmarks/verify.py [INVENTORY] [--rounds 3] [-e @vars.yml] [--baseline REF]
        [--checks GROUPS]

Without INVENTORY it verifies the running lab (`nodeprep lab up`, then `provision`, as
`make demo` leaves it). --baseline REF also runs the nodeprep of commit REF (a temporary git
worktree) in every round, interleaved with this checkout's, on the same nodes: before and
after, side by side. Last line: JSON with the medians, every run and the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from baseline import Nodeprep, checkout

NODEPREP = str(Path(sys.executable).with_name("nodeprep"))


def lab_inventory(scratch: Path) -> Path:
    done = subprocess.run(
        [NODEPREP, "lab", "inventory", "--output", str(scratch / "lab.ini")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"no inventory given and no running lab: {done.stderr.strip()}")
    return Path(done.stdout.strip())


def verify(
    nodeprep: Nodeprep, inventory: Path, fast: bool, extra: list[str], out: Path
) -> tuple[float, dict[str, Any]]:
    argv = nodeprep.argv("verify", str(inventory), "--json", str(out), *extra)
    started = time.monotonic()
    done = subprocess.run(
        [*argv, "--fast"] if fast else argv,
        capture_output=True, text=True, timeout=1800, check=False, env=nodeprep.env(),
    )  # fmt: skip
    seconds = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"verify did not run (exit {done.returncode}):\n{done.stdout[-3000:]}")
    return seconds, json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", nargs="?", type=Path)
    parser.add_argument("--rounds", type=int, default=3, help="runs per mode (default 3)")
    parser.add_argument("-e", dest="extra_vars", action="append", default=[])
    parser.add_argument("--baseline", metavar="REF", help="also run commit REF's nodeprep")
    parser.add_argument(
        "--checks", help="verify --checks GROUPS, e.g. all but smoke to leave the drill out"
    )
    args = parser.parse_args()
    extra = [part for value in args.extra_vars for part in ("-e", value)]
    extra += ["--checks", args.checks] if args.checks else []
    with ExitStack() as stack:
        variants = [Nodeprep("after")]
        if args.baseline:
            variants.insert(0, Nodeprep("before", stack.enter_context(checkout(args.baseline))))
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="np-bench-")))
        inventory = args.inventory or lab_inventory(scratch)
        runs, counts = measure(variants, inventory, args.rounds, extra, scratch)
    summary: dict[str, Any] = {"rounds": args.rounds, "runs": runs, "counts": counts,
                               "checks": args.checks or "all"}  # fmt: skip
    for variant in variants:
        linear = statistics.median(runs[f"{variant.label}_linear"])
        fast = statistics.median(runs[f"{variant.label}_fast"])
        prefix = "" if variant.label == "after" else "baseline_"
        summary.update({f"{prefix}linear_s": linear, f"{prefix}fast_s": fast})
        print(f"{variant.label}: median linear {linear:.1f} s, --fast {fast:.1f} s "
              f"({linear / fast:.1f}x)")  # fmt: skip
    summary["speedup"] = round(summary["linear_s"] / summary["fast_s"], 2)
    if args.baseline:
        summary["baseline"] = args.baseline
        for mode in ("linear", "fast"):
            ratio = summary[f"{mode}_s"] / summary[f"baseline_{mode}_s"]
            summary[f"{mode}_after_to_before"] = round(ratio, 2)
            print(f"{mode}: after/before {ratio:.2f}")
    print(json.dumps(summary))


def measure(
    variants: list[Nodeprep], inventory: Path, rounds: int, extra: list[str], scratch: Path
) -> tuple[dict[str, list[float]], dict[str, dict[str, int]]]:
    """Every variant in both modes once per round, interleaved; the check counts must hold."""
    runs: dict[str, list[float]] = {}
    counts: dict[str, dict[str, int]] = {}
    for round_no in range(1, rounds + 1):
        for variant in variants:
            for mode in ("linear", "fast"):
                key = f"{variant.label}_{mode}"
                out = scratch / "r.json"
                seconds, report = verify(variant, inventory, mode == "fast", extra, out)
                runs.setdefault(key, []).append(round(seconds, 1))
                if counts.setdefault(key, report["counts"]) != report["counts"]:
                    raise SystemExit(f"{key} run {round_no} reported {report['counts']}, "
                                     f"earlier runs {counts[key]}: the nodes changed")  # fmt: skip
                print(f"round {round_no}, {key}: {seconds:.1f} s {report['counts']}", flush=True)
    for variant in variants:
        linear, fast = counts[f"{variant.label}_linear"], counts[f"{variant.label}_fast"]
        if linear != fast:
            raise SystemExit(f"{variant.label}: the modes disagree: linear {linear}, fast {fast}")
    return runs, counts


if __name__ == "__main__":
    main()
