"""Fetch Debian packages with a private apt state, without touching the host's apt.

Apptainer is packaged in Debian sid only; a Debian 12 or 13 machine fetches that one
package (and, for an offline node, the packages it lacks) from its usual Debian mirror.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
from pathlib import Path

from nodeprep.image.errors import ImageError

log = logging.getLogger(__name__)
APPTAINER_PACKAGE = "apptainer"
# What an offline node also gets with it: squashfuse lets users other than root run a SIF
# image (mounted with FUSE); without it Apptainer unpacks the whole image into a temporary
# directory at every start (a lab node's root filesystem ran out of space doing so).
NODE_EXTRA_PACKAGES = ("squashfuse",)
# Where the package lives, and the release whose libraries satisfy its dependencies.
PACKAGE_SUITE = "sid"
BASE_SUITE = "trixie"


def _apt_options(state: Path, status: Path) -> list[str]:
    return [
        f"-oDir::Etc::SourceList={state / 'sources.list'}",
        "-oDir::Etc::SourceParts=/dev/null",
        "-oDir::Etc::Preferences=/dev/null",
        "-oDir::Etc::PreferencesParts=/dev/null",
        f"-oDir::State::Lists={state / 'lists'}",
        f"-oDir::State::Status={status}",
        f"-oDir::Cache={state / 'cache'}",
        "-oAcquire::Languages=none",
        "-oAPT::Sandbox::User=root",
    ]


def _apt(args: list[str], timeout_s: float, cwd: Path) -> None:
    done = subprocess.run(
        ["apt-get", "-q", *args],
        capture_output=True, text=True, timeout=timeout_s, check=False, cwd=cwd,
    )  # fmt: skip
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-8:]
        raise ImageError(f"apt-get {args[-1]} failed: " + " | ".join(tail))


def fetch_debs(mirror: str, dest: Path, node_status: Path | None = None) -> list[Path]:
    """Download apptainer from sid into DEST; with NODE_STATUS (a node's dpkg status file)
    also every package that node lacks to install it offline. Returns DEST's .deb files."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nodeprep-apt-") as tmp:
        state = Path(tmp)
        (state / "lists" / "partial").mkdir(parents=True)
        (state / "cache" / "archives" / "partial").mkdir(parents=True)
        suites = [PACKAGE_SUITE] if node_status is None else [BASE_SUITE, PACKAGE_SUITE]
        (state / "sources.list").write_text("".join(f"deb {mirror} {s} main\n" for s in suites))
        status = state / "empty-status"
        status.touch()
        options = _apt_options(state, node_status or status)
        log.info("fetching the %s package lists from %s", "+".join(suites), mirror)
        _apt([*options, "update"], timeout_s=600, cwd=dest)
        if node_status is None:
            _apt([*options, "download", APPTAINER_PACKAGE], timeout_s=600, cwd=dest)
        else:
            # Default-Release: dependencies come from trixie, only apptainer from sid.
            options.append(f"-oAPT::Default-Release={BASE_SUITE}")
            _apt([*options, f"-oDir::Cache::Archives={dest}", "install", "--download-only", "-y",
                  "--no-install-recommends", f"{APPTAINER_PACKAGE}/{PACKAGE_SUITE}",
                  *NODE_EXTRA_PACKAGES], timeout_s=600, cwd=dest)  # fmt: skip
    return sorted(dest.glob("*.deb"))
