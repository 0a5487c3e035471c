"""What goes into a lab node image, and the hash that names its cache entry.

Everything that changes the built image is in the recipe and therefore in the hash; the
mirror and the SSH key are not, so a cached image survives a mirror move, and each lab
replaces the image's key with its own at start-up.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nodeprep.lab.errors import LabInputError

DISTROS = {"trixie": "13", "bookworm": "12"}
DEFAULT_DISTRO = "trixie"
GUEST_USER = "nodeprep"
ROOT_LABEL = "root"
DATA_LABEL = "data"
MGMT_MAC = "52:54:00:4e:50:01"
BOND_MACS = ("52:54:00:4e:50:10", "52:54:00:4e:50:11")

BASE_PACKAGES = (
    "linux-image-amd64", "initramfs-tools", "zstd", "systemd-sysv", "dbus",
    "network-manager", "openssh-server", "python3", "python3-apt", "sudo", "iproute2",
    "cloud-guest-utils", "fdisk", "e2fsprogs", "xfsprogs", "iputils-ping", "ethtool",
    "ca-certificates", "systemd-timesyncd",
    # pam_systemd: SSH logins become logind sessions, as on a standard Debian server, so
    # KillUserProcesses, lingering and logout really apply to what a test starts over SSH.
    "libpam-systemd",
)  # fmt: skip
# What roles would otherwise fetch from the network; under TCG an apt run costs minutes.
# tmux: the tmux role's `auto` method picks Debian's own (3.5a on Debian 13).
ROLE_PACKAGES = (
    "build-essential", "make", "pkg-config", "libevent-dev", "libncurses-dev", "bison",
    "python3-venv", "python3-pip", "rsync", "tmux",
)  # fmt: skip

# Runs inside mmdebstrap's customize hook with the root filesystem as $1. @PUBKEY@ is the
# image's bootstrap key; it is substituted after hashing, so it does not change the hash.
CUSTOMIZE_HOOK = Path(__file__).with_name("customize.sh").read_text()


@dataclass(frozen=True)
class Recipe:
    """A node image: Debian suite, packages, disk sizes and the customisation script."""

    distro: str = DEFAULT_DISTRO
    packages: tuple[str, ...] = field(default=BASE_PACKAGES + ROLE_PACKAGES)
    # Sparse: 16 GiB costs only what is written, and leaves the 10 GiB free that preflight wants
    # with the trainer image (~370 MB) and Apptainer on the node.
    root_size_mb: int = 16384
    data_size_mb: int = 1024
    hook: str = CUSTOMIZE_HOOK
    format_version: int = 1

    def __post_init__(self) -> None:
        if self.distro not in DISTROS:
            choices = ", ".join(sorted(DISTROS))
            raise LabInputError(f"Unknown distro {self.distro!r}; choose one of: {choices}.")

    def digest(self) -> str:
        """A short content hash: the image cache key."""
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def hook_script(self, pubkey: str) -> str:
        """The customize hook with names and the bootstrap key filled in."""
        values = {
            "@USER@": GUEST_USER,
            "@ROOT@": ROOT_LABEL,
            "@DATA@": DATA_LABEL,
            "@MGMT_MAC@": MGMT_MAC,
            "@PUBKEY@": pubkey.strip(),
        }
        script = self.hook
        for marker, value in values.items():
            script = script.replace(marker, value)
        return script
