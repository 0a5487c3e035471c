"""Apptainer on the machine that builds images: the installed one, or one run from a rootfs.

Apptainer 1.4 is packaged in Debian sid and needs glibc 2.38. A Debian 13 host installs
that package; a Debian 12 host cannot, so it gets a cached Debian 13 root filesystem with
the package inside and a small entry script (enter-rootfs.sh) that stands in for the
``apptainer`` executable. Everything here is cached by content and built once per machine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

from nodeprep.image.debs import BASE_SUITE, fetch_debs
from nodeprep.image.errors import ImageError, ImageInputError

log = logging.getLogger(__name__)
ROOTFS_CHOICE = "debian13-rootfs"
# Tools apptainer calls during `Bootstrap: debootstrap` builds, plus umount for the entry.
ROOTFS_PACKAGES = ("debootstrap", "mount", "e2fsprogs", "ca-certificates")
ENTRY_SCRIPT = Path(__file__).with_name("enter-rootfs.sh").read_text()
MIN_GLIBC = (2, 38)
FORMAT_VERSION = 1


def cache_dir() -> Path:
    """$NODEPREP_APPTAINER_CACHE, else ~/.cache/nodeprep/apptainer (XDG_CACHE_HOME honoured)."""
    explicit = os.environ.get("NODEPREP_APPTAINER_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(home) / "nodeprep" / "apptainer"


def runs(executable: str) -> bool:
    """Whether EXECUTABLE answers ``--version`` (it exists and its libraries load)."""
    try:
        done = subprocess.run(
            [executable, "--version"], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def glibc_is_new_enough() -> bool:
    found = os.confstr("CS_GNU_LIBC_VERSION") or "glibc 0.0"
    major, minor = found.split()[-1].split(".")[:2]
    return (int(major), int(minor)) >= MIN_GLIBC


def rootfs_key() -> str:
    blob = json.dumps([BASE_SUITE, ROOTFS_PACKAGES, ENTRY_SCRIPT, FORMAT_VERSION]).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def rootfs_apptainer(cache: Path, mirror: str) -> Path:
    """The entry script that runs apptainer from the cached Debian 13 rootfs (built if absent)."""
    if os.geteuid() != 0:
        raise ImageInputError(
            f"--apptainer {ROOTFS_CHOICE} needs root (it enters a private mount namespace); "
            "run as root or install apptainer and pass its path."
        )
    key = rootfs_key()
    root = cache / f"rootfs-{key}"
    if not (root / "usr" / "bin" / "apptainer").exists():
        _build_rootfs(root, mirror, cache / "debs")
    entry = cache / f"apptainer-{key}"
    script = ENTRY_SCRIPT.replace("@ROOTFS@", str(root)).replace("@COMMAND@", "/usr/bin/apptainer")
    if not entry.exists() or entry.read_text() != script:
        entry.write_text(script)
        entry.chmod(0o755)
    return entry


def _build_rootfs(root: Path, mirror: str, debs: Path) -> None:
    deb = _newest(fetch_debs(mirror, debs))
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    log.info("building a Debian 13 root filesystem with %s in %s (minutes, once)", deb.name, root)
    argv = [
        "mmdebstrap", "--variant=apt", "--skip=essential/unlink",
        f"--include={','.join(ROOTFS_PACKAGES)}",
        f"--customize-hook=copy-in {deb} /tmp",
        f'--customize-hook=chroot "$1" apt-get install -y -q --no-install-recommends '
        f"/tmp/{deb.name}",
        f'--customize-hook=rm -f "$1/tmp/{deb.name}"',
        BASE_SUITE, str(partial), mirror,
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        tail = done.stderr.strip().splitlines()[-10:]
        raise ImageError("mmdebstrap could not build the apptainer rootfs: " + " | ".join(tail))
    partial.rename(root)


def _newest(debs: list[Path]) -> Path:
    found = [deb for deb in debs if deb.name.startswith("apptainer_")]
    if not found:
        raise ImageError("apt-get downloaded no apptainer package from Debian sid.")
    return found[-1]


def install_package(cache: Path, mirror: str) -> Path:
    """Install sid's apptainer package on this (Debian 13 or newer) host with apt."""
    deb = _newest(fetch_debs(mirror, cache / "debs"))
    log.info("installing %s with apt-get", deb.name)
    done = subprocess.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", str(deb)],
        capture_output=True, text=True, timeout=900, check=False,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )  # fmt: skip
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-8:]
        raise ImageError(f"apt-get could not install {deb.name}: " + " | ".join(tail))
    return Path("/usr/bin/apptainer")


def ensure_apptainer(cache: Path, mirror: str) -> Path:
    """A working apptainer for this host: on PATH, else the package, else the rootfs shim."""
    installed = shutil.which("apptainer")
    if installed and runs(installed):
        return Path(installed)
    if glibc_is_new_enough() and os.geteuid() == 0:
        return install_package(cache, mirror)
    return rootfs_apptainer(cache, mirror)
