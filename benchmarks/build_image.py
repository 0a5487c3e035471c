"""Trainer image benchmark: cold build time, cached-skip time and image size.

Usage: python benchmarks/build_image.py [--apptainer PATH] [--wheelhouse DIR] [--torch SPEC]
                                        [--output PATH] [--skips N]

Runs `nodeprep build-image --force` once (a real build), then the same command without
--force N times (each must skip); quotes the build's wall time, the median skip wall time
(whole CLI process) and the in-process skip time the CLI prints. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run(argv: list[str]) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=3600, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apptainer", default="apptainer")
    parser.add_argument("--wheelhouse")
    parser.add_argument("--torch", default="none")
    parser.add_argument("--output", default="/tmp/nodeprep-bench.sif")
    parser.add_argument("--skips", type=int, default=5)
    args = parser.parse_args()
    argv = [str(Path(sys.executable).with_name("nodeprep")), "build-image", "--apptainer",
            args.apptainer, "--torch", args.torch, "--output", args.output]  # fmt: skip
    if args.wheelhouse:
        argv += ["--wheelhouse", args.wheelhouse]
    build_s, _ = run([*argv, "--force"])
    size = Path(args.output).stat().st_size
    walls, inner = [], []
    for _ in range(args.skips):
        wall, out = run(argv)
        found = re.search(r"build skipped in ([\d.]+) s", out)
        if not found:
            raise SystemExit(f"expected a skipped build, got: {out}")
        walls.append(wall)
        inner.append(float(found.group(1)))
    print(f"build (--torch {args.torch}): {build_s:.1f} s, image {size / 1e6:.0f} MB")
    print(f"skip: median {statistics.median(walls):.2f} s wall (CLI process), "
          f"{statistics.median(inner):.2f} s in build-image, over {args.skips} runs")  # fmt: skip
    summary = {
        "torch": args.torch,
        "build_s": round(build_s, 1),
        "image_mb": round(size / 1e6, 1),
        "skip_wall_median_s": round(statistics.median(walls), 3),
        "skip_inner_median_s": round(statistics.median(inner), 3),
        "skips": args.skips,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
