"""The full `nodeprep provision` on lab nodes: first run, second (idempotent) run, per mode.

For each mode (plain Ansible with pipelining, then `--fast`, the mitogen strategy) a fresh
lab of N nodes is restored from the saved state, the default playbook runs twice through the
real command line, and the figures come from its --json summary. Nodes are separate qemu VMs
on this machine; under software emulation every task costs seconds, so the ratios between
runs and modes say more than the absolute figures.

    .venv/bin/python benchmarks/provision.py [--quick] [--nodes 2] [--modes plain,fast]

--quick: one node, --fast only. --baseline REF: also the nodeprep of commit REF (a temporary
git worktree), each on its own freshly restored lab, before this checkout's: before and
after, side by side in one run. -e passes extra variables to every provision. Last line:
JSON for the last mode measured, with every mode's figures under "modes" (and the baseline's
under "baseline").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from baseline import Nodeprep, checkout
from nodeprep.lab import lifecycle
from nodeprep.lab.inventory import render_ini
from nodeprep.lab.paths import cache_dir


def provision(
    nodeprep: Nodeprep, inventory: Path, fast: bool, extra: list[str], out: Path
) -> tuple[float, dict[str, Any]]:
    argv = nodeprep.argv("provision", str(inventory), "--json", str(out), *extra)
    started = time.monotonic()
    command = [*argv, "--fast"] if fast else argv
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=3600, check=False, env=nodeprep.env()
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"provision failed (exit {done.returncode}):\n{done.stdout[-4000:]}")
    return seconds, json.loads(out.read_text())


def tasks_per_node(summary: dict[str, Any]) -> int:
    """Task results on the busiest node (Ansible's ok count includes the changed ones)."""
    return max(r["ok"] + r["failed"] + r["skipped"] for r in summary["hosts"].values())


def measure(
    nodeprep: Nodeprep, nodes: int, fast: bool, extra: list[str], scratch: Path
) -> dict[str, Any]:
    lab = scratch / f"lab-{nodeprep.label}-{'fast' if fast else 'plain'}"
    try:
        state = lifecycle.up(lifecycle.UpRequest(nodes=nodes), lab, cache_dir())
        inventory = scratch / "lab.ini"
        inventory.write_text(render_ini(state))
        first_s, first = provision(nodeprep, inventory, fast, extra, scratch / "first.json")
        second_s, second = provision(nodeprep, inventory, fast, extra, scratch / "second.json")
    finally:
        lifecycle.down(lab)
    tasks = tasks_per_node(first)
    figures = {
        "nodes": nodes,
        "fast": fast,
        "first_run_s": round(first_s, 1),
        "second_run_s": round(second_s, 1),
        "second_run_changed": sum(r["changed"] for r in second["hosts"].values()),
        "tasks": tasks,
        "s_per_task": round(first_s / tasks, 2),
        "second_to_first": round(second_s / first_s, 2),
        "first_changed": sum(r["changed"] for r in first["hosts"].values()),
    }
    mode = "--fast" if fast else "plain"
    print(
        f"{nodeprep.label}, {nodes} node(s), {mode}: first {first_s:.0f} s"
        f" ({figures['first_changed']} changed,"
        f" {tasks} tasks/node, {figures['s_per_task']} s/task), second {second_s:.0f} s"
        f" ({figures['second_run_changed']} changed, {figures['second_to_first']:.0%} of first)",
        flush=True,
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one node, --fast only")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--modes", default="plain,fast", help="comma-separated: plain, fast")
    parser.add_argument("--baseline", metavar="REF", help="also run commit REF's nodeprep first")
    parser.add_argument("-e", dest="extra_vars", action="append", default=[])
    args = parser.parse_args()
    extra = [part for value in args.extra_vars for part in ("-e", value)]
    nodes, modes = (1, ["fast"]) if args.quick else (args.nodes, args.modes.split(","))
    unknown = sorted(set(modes) - {"plain", "fast"})
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; use plain and/or fast")
    results: dict[str, dict[str, Any]] = {}
    before: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="nodeprep-bench-") as scratch:
        for mode in modes:
            if args.baseline:
                with checkout(args.baseline) as root:
                    old = Nodeprep("before", root)
                    before[mode] = measure(old, nodes, mode == "fast", extra, Path(scratch))
            results[mode] = measure(Nodeprep("after"), nodes, mode == "fast", extra, Path(scratch))
    last = results[modes[-1]]
    summary = {key: last[key] for key in ("nodes", "first_run_s", "second_run_s", "second_to_first",
                                          "second_run_changed", "tasks", "s_per_task")}  # fmt: skip
    if args.baseline:
        summary.update(baseline=args.baseline, baseline_modes=before)
        old = before[modes[-1]]
        summary.update(
            baseline_first_run_s=old["first_run_s"],
            baseline_second_run_s=old["second_run_s"],
            second_run_after_to_before=round(last["second_run_s"] / old["second_run_s"], 2),
        )
    print(json.dumps({**summary, "modes": results}))


if __name__ == "__main__":
    main()
