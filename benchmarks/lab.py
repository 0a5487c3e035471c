"""Lab timings: cold image build, boot to SSH from the image, restore to SSH from saved state.

Prints each figure, then (last line) one JSON summary. Figures are medians of side-by-side
runs in one process; on a shared 2-core machine they are noisy, so read them as rough.

    .venv/bin/python benchmarks/lab.py [--boots 1] [--restores 3] [--reuse-image]

The first run on a machine builds the image cold into the real cache and times that.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

from nodeprep.lab.accel import choose_accel
from nodeprep.lab.image import Image, build_image, cached_image, ensure_image
from nodeprep.lab.lifecycle import free_port
from nodeprep.lab.node import Machine, NodeFiles, stop_qemu
from nodeprep.lab.paths import cache_dir
from nodeprep.lab.recipe import Recipe
from nodeprep.lab.savedstate import boot_fresh, ensure_saved_state, restore_node


def cold_build_seconds(recipe: Recipe, reuse: bool) -> float:
    """Time a cold build: into the real cache when it lacks the image, else into a scratch one.

    With reuse, a cached image's recorded build time is reported instead.
    """
    found = cached_image(recipe, cache_dir())
    if found is None:
        started = time.monotonic()
        ensure_image(recipe, cache_dir())
        seconds = time.monotonic() - started
        print(f"cold build: {seconds:.1f} s")
        return seconds
    if reuse:
        manifest = json.loads((found.directory / "manifest.json").read_text())
        print(f"cold build: {manifest['build_s']:.1f} s (recorded when the cache was built)")
        return float(manifest["build_s"])
    with tempfile.TemporaryDirectory(prefix="nodeprep-bench-") as scratch:
        started = time.monotonic()
        build_image(recipe, Path(scratch))
        seconds = time.monotonic() - started
    print(f"cold build: {seconds:.1f} s")
    return seconds


def boot_seconds(image: Image, machine: Machine, runs: int, scratch: Path) -> list[float]:
    """Boot from the image to SSH, `runs` times, each node ended before the next."""
    figures = []
    for run in range(runs):
        files = NodeFiles(scratch / f"boot{run}")
        pid, seconds = boot_fresh(image, machine, files, free_port())
        stop_qemu(pid, files)
        figures.append(seconds)
        print(f"boot to SSH #{run + 1}: {seconds:.1f} s")
    return figures


def restore_seconds(image: Image, machine: Machine, runs: int, scratch: Path) -> list[float]:
    """Restore the saved state to SSH, `runs` times."""
    saved = ensure_saved_state(image, machine, cache_dir(), free_port())
    figures = []
    for run in range(runs):
        files = NodeFiles(scratch / f"restore{run}")
        pid, seconds = restore_node(image, machine, saved, files, free_port())
        stop_qemu(pid, files)
        figures.append(seconds)
        print(f"restore to SSH #{run + 1}: {seconds:.1f} s")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boots", type=int, default=1)
    parser.add_argument("--restores", type=int, default=3)
    parser.add_argument(
        "--reuse-image",
        action="store_true",
        help="report the cached image's recorded build time instead of rebuilding",
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    recipe = Recipe()
    cold = cold_build_seconds(recipe, args.reuse_image)
    image = ensure_image(recipe, cache_dir())
    machine = Machine(choose_accel(image.kernel))
    print(f"accel: {machine.accel}")
    with tempfile.TemporaryDirectory(prefix="nodeprep-bench-") as scratch:
        boots = boot_seconds(image, machine, args.boots, Path(scratch))
        restores = restore_seconds(image, machine, args.restores, Path(scratch))
    summary = {
        "cold_build_s": round(cold, 1),
        "boot_to_ssh_s": round(statistics.median(boots), 1),
        "restore_to_ssh_s": round(statistics.median(restores), 1),
        "accel": machine.accel,
    }
    print(
        f"median boot to SSH {summary['boot_to_ssh_s']} s, restore {summary['restore_to_ssh_s']} s"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
