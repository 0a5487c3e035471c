"""One real build of the trainer image per run, shared by the image tests (and left in the
cache for the lab tier's quick-start chain): torch from the local wheelhouse, --force so every
run builds. Under `make test` that build ran in the background (tests/prefetch.py) while the
earlier tiers ran; its record is this run's build."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from image_testbed import (
    TORCH_IMAGE,
    apptainer,
    build_image,
    take_prefetched_build,
    torch_wheelhouse,
)


@pytest.fixture(scope="session")
def runtime_path() -> Path:
    return apptainer()


@pytest.fixture(scope="session")
def built(runtime_path: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    """The build's process and the torch requirement it installed."""
    prefetched = take_prefetched_build()
    if prefetched is not None:
        print("the trainer image was built in the background of this run (tests/prefetch.py)")
        return prefetched
    wheelhouse, requirement = torch_wheelhouse()
    done = build_image(
        runtime_path, TORCH_IMAGE, "--force", "--wheelhouse", str(wheelhouse), torch=requirement
    )
    print(done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else done.stderr[-500:])
    return done, requirement
