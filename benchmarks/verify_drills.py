"""Time the verify drills on this machine: the kill-and-resume smoke drill and the heartbeat
drill (probe target stopped -> emergency checkpoint committed), interleaved, N rounds each.

Prints each round, the medians, and as the last line a one-line JSON summary.
usage: python benchmarks/verify_drills.py [--rounds 3] [--steps 24]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from nodeprep.smoke.drill import DrillConfig, run_drill
from nodeprep.smoke.heartbeat_drill import run_heartbeat_drill


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=24)
    args = parser.parse_args()
    smoke_s: list[float] = []
    stop_to_commit: list[float] = []
    signal_to_commit: list[float] = []
    failures = 0
    for round_no in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory(prefix="bench-smoke-") as work:
            drill = run_drill(DrillConfig(Path(work), steps=args.steps, python=sys.executable))
        failures += not drill.passed
        smoke_s.append(drill.seconds)
        print(f"round {round_no} smoke: {drill.seconds:.2f} s passed={drill.passed} {drill.detail}")
        with tempfile.TemporaryDirectory(prefix="bench-hb-") as work:
            beat = run_heartbeat_drill(Path(work), sys.executable)
        failures += not beat.passed
        if beat.stop_to_commit_s is not None and beat.signal_to_commit_s is not None:
            stop_to_commit.append(beat.stop_to_commit_s)
            signal_to_commit.append(beat.signal_to_commit_s)
        print(
            f"round {round_no} heartbeat: {beat.seconds:.2f} s passed={beat.passed} {beat.detail}"
        )
    summary = {
        "rounds": args.rounds,
        "smoke_steps": args.steps,
        "smoke_drill_median_s": round(statistics.median(smoke_s), 2),
        "heartbeat_stop_to_commit_median_s": _median(stop_to_commit),
        "heartbeat_signal_to_commit_median_s": _median(signal_to_commit),
        "failures": failures,
    }
    print(f"median smoke drill {summary['smoke_drill_median_s']} s; median target stop -> "
          f"emergency checkpoint {summary['heartbeat_stop_to_commit_median_s']} s")  # fmt: skip
    print(json.dumps(summary, sort_keys=True))
    return 1 if failures else 0


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


if __name__ == "__main__":
    sys.exit(main())
