"""Apptainer and the trainer image for the image and lab tiers.

Debian 13 gets sid's apptainer package; Debian 12 runs it from a cached Debian 13 root
filesystem (nodeprep.image.runtime decides). The image holds nodeprep and the CPU build of
torch from a wheelhouse that pip fills once per machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodeprep.debmirror import debian_mirror
from nodeprep.image import runtime

# Built by the image tier (always, --force); the lab tier's quick-start chain reuses it.
TORCH_IMAGE = runtime.cache_dir() / "test-images" / "nodeprep-torch.sif"
SUBID_ENTRY = "root:100000:65536"


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
