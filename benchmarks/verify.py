"""`nodeprep verify` on provisioned nodes, the linear strategy against `--fast`, side by side.

The runs alternate (linear, fast, linear, fast, ...) on the same nodes, so both modes see the
same load; each figure is the median of its mode's runs, from the command line as a user
runs it. Verify changes nothing on a node, so the runs do not disturb one another.

    .venv/bin/python benchmarks/verify.py [INVENTORY] [--rounds 3] [-e @vars.yml]

Without INVENTORY it verifies the running lab (`nodeprep lab up`, then `provision`, as
`make demo` leaves it). Last line: JSON with both medians, every run and the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
    inventory: Path, fast: bool, extra: list[str], out: Path
) -> tuple[float, dict[str, Any]]:
    argv = [NODEPREP, "verify", str(inventory), "--json", str(out), *extra]
    started = time.monotonic()
    done = subprocess.run(
        [*argv, "--fast"] if fast else argv,
        capture_output=True, text=True, timeout=1800, check=False,
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
    args = parser.parse_args()
    extra = [part for value in args.extra_vars for part in ("-e", value)]
    runs: dict[str, list[float]] = {"linear": [], "fast": []}
    counts: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="nodeprep-bench-verify-") as tmp:
        scratch = Path(tmp)
        inventory = args.inventory or lab_inventory(scratch)
        for round_no in range(1, args.rounds + 1):
            for mode in ("linear", "fast"):
                seconds, report = verify(inventory, mode == "fast", extra, scratch / "r.json")
                runs[mode].append(round(seconds, 1))
                if counts.setdefault(mode, report["counts"]) != report["counts"]:
                    raise SystemExit(f"{mode} run {round_no} reported {report['counts']}, "
                                     f"earlier runs {counts[mode]}: the nodes changed")  # fmt: skip
                print(f"round {round_no}, {mode}: {seconds:.1f} s {report['counts']}", flush=True)
    if counts["linear"] != counts["fast"]:
        raise SystemExit(f"the modes disagree: linear {counts['linear']}, fast {counts['fast']}")
    linear, fast = statistics.median(runs["linear"]), statistics.median(runs["fast"])
    print(f"median linear {linear:.1f} s, --fast {fast:.1f} s: {linear / fast:.1f}x")
    summary = {
        "counts": counts["fast"],
        "linear_s": linear,
        "fast_s": fast,
        "speedup": round(linear / fast, 2),
        "runs": runs,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
