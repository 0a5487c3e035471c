"""Apptainer for lab nodes: the extra vars that let `nodeprep provision` apply the apptainer
role to a running lab, which has no package repositories and no internet.

Debian 13 has no apptainer package, so sid's .deb (with squashfuse, so that the login user's
jobs mount the image instead of unpacking it) and the packages a lab node lacks for them are
fetched once into the cache (from the Debian mirror, against the node's own dpkg status) and
sent by the controller (`src` entries), each with its sha256, as the role checks them.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from nodeprep.debmirror import debian_mirror
from nodeprep.image import runtime
from nodeprep.image.debs import APPTAINER_PACKAGE, NODE_EXTRA_PACKAGES, fetch_debs
from nodeprep.image.definition import file_sha256
from nodeprep.image.errors import ImageError
from nodeprep.lab.errors import LabError, LabInputError
from nodeprep.lab.ssh import SshTarget, run_ssh
from nodeprep.lab.state import LabState

log = logging.getLogger(__name__)
IMAGE_DEST = "/opt/nodeprep/images/nodeprep-trainer.sif"
# The lab guest's root lacks capabilities Apptainer grants by default to root's containers.
CONF_SETTINGS = {"root default capabilities": "no"}


def guest_debs(dpkg_status: str) -> list[Path]:
    """sid's apptainer and the packages a guest with DPKG_STATUS lacks for it, cached per
    guest state (every lab node of one image has the same)."""
    wanted = " ".join([APPTAINER_PACKAGE, *NODE_EXTRA_PACKAGES])
    key = hashlib.sha256(f"{wanted}\0{dpkg_status}".encode()).hexdigest()[:16]
    dest = runtime.cache_dir() / f"guest-debs-{key}"
    found = sorted(dest.glob("*.deb"))
    if all(any(p.name.startswith(f"{name}_") for p in found) for name in wanted.split()):
        return found
    status = dest.with_suffix(".status")
    dest.parent.mkdir(parents=True, exist_ok=True)
    status.write_text(dpkg_status)
    log.info("fetching apptainer and what the lab node lacks for it into %s", dest)
    try:
        return fetch_debs(debian_mirror(), dest, node_status=status)
    except ImageError as error:
        raise LabError(f"Could not fetch the apptainer packages: {error}") from error


def node_dpkg_status(state: LabState) -> str:
    node = state.nodes[0]
    done = run_ssh(SshTarget(node.ssh_port, Path(state.key)), "cat /var/lib/dpkg/status", 240)
    if done.returncode != 0:
        raise LabError(f"{node.name}: reading /var/lib/dpkg/status failed: {done.stderr.strip()}")
    return done.stdout


def provision_vars(state: LabState, image: Path) -> dict[str, Any]:
    """Extra vars for `nodeprep provision` on the lab: apptainer from the cached .debs, IMAGE
    copied to the nodes and checked, the lab's apptainer.conf setting."""
    if not image.is_file():
        raise LabInputError(
            f"Image {image} does not exist; build it first with `nodeprep build-image -o {image}`."
        )
    debs = guest_debs(node_dpkg_status(state))
    if not any(deb.name.startswith("apptainer_") for deb in debs):
        raise LabError(f"No apptainer package among the fetched files {[d.name for d in debs]}.")
    return {
        "apptainer_package_files": [{"src": str(d), "sha256": file_sha256(d)} for d in debs],
        "apptainer_image_src": str(image.resolve()),
        "apptainer_image_sha256": file_sha256(image),
        "apptainer_image_dest": IMAGE_DEST,
        "apptainer_conf_settings": CONF_SETTINGS,
    }
