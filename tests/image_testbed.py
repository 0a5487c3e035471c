"""Apptainer and the trainer image for the image and lab tiers.

Debian 13 gets sid's apptainer package; Debian 12 runs it from a cached Debian 13 root
filesystem (nodeprep.image.runtime decides). The image holds nodeprep and the CPU build of
torch from a wheelhouse that pip fills once per machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeprep.debmirror import debian_mirror
from nodeprep.image import runtime

# Built by the image tier (always, --force); the lab tier's quick-start chain reuses it.
TORCH_IMAGE = runtime.cache_dir() / "test-images" / "nodeprep-torch.sif"
SUBID_ENTRY = "root:100000:65536"
# `make test` builds that image in the background while lint and the unit tier run
# (tests/prefetch.py); the image tier waits on this lock and takes the build's record.
PREFETCH_LOCK = TORCH_IMAGE.with_name("prefetch.lock")
PREFETCH_RECORD = TORCH_IMAGE.with_name("prefetch.json")
_RECORD_MAX_AGE_S = 3 * 3600


@contextlib.contextmanager
def prefetch_lock(exclusive: bool) -> Iterator[None]:
    """Held exclusively by a running prefetch; shared, it waits for one to end (or none)."""
    PREFETCH_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with PREFETCH_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield


def record_prefetch(done: subprocess.CompletedProcess[str], requirement: str) -> None:
    """What the background build printed, for the image tier to judge as its own."""
    built = TORCH_IMAGE.stat().st_mtime_ns if TORCH_IMAGE.exists() else None
    PREFETCH_RECORD.write_text(json.dumps({
        "argv": done.args, "returncode": done.returncode, "stdout": done.stdout,
        "stderr": done.stderr, "requirement": requirement, "image_mtime_ns": built,
        "recorded_at": time.time(),
    }))  # fmt: skip


def take_prefetched_build() -> tuple[subprocess.CompletedProcess[str], str] | None:
    """The background build of this run, once: waits for a running prefetch, then takes (and
    removes) its record if it is fresh and the image is still the one it built."""
    with prefetch_lock(exclusive=False):
        try:
            record = json.loads(PREFETCH_RECORD.read_text())
        except (OSError, ValueError):
            return None
        PREFETCH_RECORD.unlink(missing_ok=True)
    built = TORCH_IMAGE.stat().st_mtime_ns if TORCH_IMAGE.exists() else None
    if time.time() - record["recorded_at"] > _RECORD_MAX_AGE_S or record["image_mtime_ns"] != built:
        return None
    done = subprocess.CompletedProcess(
        record["argv"], record["returncode"], record["stdout"], record["stderr"]
    )
    return done, record["requirement"]


def ensure_subids() -> None:
    """--fakeroot as root needs subordinate ids; a fresh CI machine has none, so add them."""
    if os.geteuid() != 0:
        pytest.fail("the image tiers need root (apptainer --fakeroot builds, mount namespaces)")
    for name in ("/etc/subuid", "/etc/subgid"):
        path = Path(name)
        text = path.read_text() if path.exists() else ""
        if not any(line.startswith("root:") for line in text.splitlines()):
            path.write_text(
                text + ("" if not text or text.endswith("\n") else "\n") + SUBID_ENTRY + "\n"
            )


def apptainer() -> Path:
    ensure_subids()
    return runtime.ensure_apptainer(runtime.cache_dir(), debian_mirror())


def build_image(
    apptainer_path: Path, output: Path, *extra: str, torch: str = "none"
) -> subprocess.CompletedProcess[str]:
    """`nodeprep build-image`, as a user runs it; torch-less unless TORCH is a requirement."""
    command = [str(Path(sys.executable).with_name("nodeprep")), "build-image", "--torch", torch,
               "--apptainer", str(apptainer_path), "--output", str(output), *extra]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)


def torch_wheelhouse() -> tuple[Path, str]:
    """The wheels of the torch this venv runs (the CPU build) and its dependencies, fetched
    once per machine with pip into the cache; returns (directory, requirement)."""
    import torch

    requirement = f"torch=={torch.__version__}"
    dest = runtime.cache_dir() / f"wheelhouse-{torch.__version__}"
    if not any(dest.glob("torch-*.whl")):
        partial = dest.with_name(dest.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(dest, ignore_errors=True)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--dest", str(partial), requirement],
            capture_output=True, text=True, timeout=1200, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"pip download {requirement}: {done.stderr[-2000:]}"
        partial.rename(dest)
    return dest, requirement
