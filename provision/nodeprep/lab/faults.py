"""Faults for tests and drills, injected from outside the guest through QMP.

A cut link (`set_link`) is what a pulled cable or a dead switch port looks like to the
guest; `block_resize` is what an enlarged cloud volume looks like. Neither needs the guest's
cooperation, so they test the node's reaction rather than a script's.
"""

from __future__ import annotations

import re

from nodeprep.lab.errors import LabInputError
from nodeprep.lab.node import BOND_NICS
from nodeprep.lab.qmp import QmpClient, connect
from nodeprep.lab.state import NodeRecord

DATA_DRIVE = "data0"
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'2G', '1536M', '2GiB' or plain bytes, as bytes; a multiple of 512 (a disk sector)."""
    match = _SIZE.match(text)
    if match is None:
        raise LabInputError(f"Disk size {text!r} is not understood; write it like 2G or 1536M.")
    size = int(match.group(1)) * _UNITS[match.group(2).upper()]
    if size == 0 or size % 512:
        raise LabInputError(f"Disk size {text!r} must be a positive multiple of 512 bytes.")
    return size


# The management NIC (guest ens3): SSH and everything Ansible sends ride on it, so a cut stalls
# them until the link is restored (through QMP, which needs no network).
MGMT_NIC = "mgmt"
LINK_NICS = (*BOND_NICS, MGMT_NIC)


def set_link(node: NodeRecord, nic: str, up: bool) -> None:
    """Cut or restore one NIC's link; the guest sees carrier loss at once."""
    if nic not in LINK_NICS:
        raise LabInputError(f"NIC {nic!r} is not a lab NIC; choose one of: {', '.join(LINK_NICS)}.")
    with connect(node.files.qmp) as qmp:
        qmp.execute("set_link", {"name": nic, "up": up})


def reset(node: NodeRecord) -> None:
    """Power-cycle the node: a hard reset, as a kernel panic or a power loss would leave it
    (no shutdown runs, nothing is flushed). The node boots again in the same qemu (see
    allow_reboots)."""
    with connect(node.files.qmp) as qmp:
        allow_reboots(qmp)
        qmp.execute("system_reset")


def allow_reboots(qmp: QmpClient) -> None:
    """Make a reboot boot the node again. Its qemu command line says -no-reboot (a saved
    state's machine stays as it was), which would end qemu at the guest's reboot; nodeprep
    reboots nodes on purpose (the reboot drill), so every node starts with this. A kernel
    panic (panic=-1) then reboots the node too: its console log keeps the panic."""
    qmp.execute("set-action", {"reboot": "reset"})


def data_disk_bytes(node: NodeRecord) -> int:
    """The data disk's current virtual size, as qemu sees it."""
    with connect(node.files.qmp) as qmp:
        for block in qmp.execute("query-block"):
            if block.get("device") == DATA_DRIVE:
                return int(block["inserted"]["image"]["virtual-size"])
    raise LabInputError(f"{node.name} has no data disk {DATA_DRIVE}.")


def grow_disk(node: NodeRecord, size: int) -> int:
    """Grow the data disk to `size` bytes (never shrink: that would destroy data)."""
    current = data_disk_bytes(node)
    if size <= current:
        raise LabInputError(
            f"Disk size {size} bytes is not larger than the current {current} bytes; "
            "give a larger size (the lab only grows disks)."
        )
    with connect(node.files.qmp) as qmp:
        qmp.execute("block_resize", {"device": DATA_DRIVE, "size": size})
    return size
