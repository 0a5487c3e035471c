"""Builds, in the background of `make test`, what later tiers would otherwise build in their
own time: the trainer image (the image tier's build, which the lab's quick start reuses), the
lab's node image and its saved state (a booted template every lab node is restored from).
They run at the lowest priority beside lint and the unit tier (two workers).

The image tier waits for this build (image_testbed.prefetch_lock) and judges its record as
its own build; the lab tier waits on the lab cache's own locks (image, saved state) and
finds both made. A prefetch that failed or never ran costs only time: the tiers build themselves.

Usage: python tests/prefetch.py   (started and ended by .ci/prefetch; stdout is its log)
"""

from __future__ import annotations

import sys
import time

from image_testbed import (
    TORCH_IMAGE,
    apptainer,
    build_image,
    prefetch_lock,
    record_prefetch,
    torch_wheelhouse,
)
from nodeprep.lab import lifecycle
from nodeprep.lab.accel import choose_accel
from nodeprep.lab.image import ensure_image
from nodeprep.lab.node import Machine
from nodeprep.lab.paths import cache_dir
from nodeprep.lab.recipe import Recipe
from nodeprep.lab.savedstate import ensure_saved_state


def main() -> int:
    started = time.monotonic()
    with prefetch_lock(exclusive=True):
        runtime_path = apptainer()
        wheelhouse, requirement = torch_wheelhouse()
        done = build_image(
            runtime_path, TORCH_IMAGE, "--force", "--wheelhouse", str(wheelhouse),
            torch=requirement,
        )  # fmt: skip
        record_prefetch(done, requirement)
    print(f"trainer image: exit {done.returncode} after {time.monotonic() - started:.0f} s")
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:])
    lab_started = time.monotonic()
    image = ensure_image(Recipe(), cache_dir())
    print(f"lab image {image.digest}: ready after {time.monotonic() - lab_started:.0f} s")
    state_started = time.monotonic()
    machine = Machine(choose_accel(image.kernel))
    ensure_saved_state(image, machine, cache_dir(), lifecycle.free_port())
    print(f"lab saved state: ready after {time.monotonic() - state_started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
