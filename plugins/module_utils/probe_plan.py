"""The heartbeat's default probes, composed from what a node is.

A node provisioned with defaults is watched for what ends training runs on it: the cloud
taking it away (the metadata service and its notices, where a cloud's firmware says the node
is one of its VMs and its metadata service answers), its network (the bond's peer where the
bond role has one, else the default route's gateway), the filesystems of every checkpoint and
data path the inventory names (writes and free space), its NVIDIA GPUs where there are any,
and the registered trainers' progress. Each probe comes with why it was chosen; what could not
be watched comes with why not. Standard library and Python 3.8 only, for the module_utils use.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.nodeprep.hardening.plugins.module_utils.cloud_metadata import (
    A_VM,
    LABELS,
)

ROUTE_TABLE = "/proc/net/route"
PING_GROUP_RANGE = "/proc/sys/net/ipv4/ping_group_range"
MAX_GID = 2147483647  # the top of ping_group_range's open setting, 0 2147483647
PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_VENDOR = "0x10de"
PROBE_DIR = ".nodeprep-heartbeat"
# Mounts the heartbeat service cannot see (ProtectHome=yes in its unit).
HIDDEN = ("/home/", "/root/", "/run/user/")
ROOT_PROBE_DIR = "/var/lib/nodeprep-heartbeat"
# Notice windows are short (AWS: about 2 min; GCP and Azure spot: about 30 s), so the
# notices are polled every second; the metadata service itself every 5 s.
METADATA = {"interval": 5, "timeout": 2}
NOTICES = {"interval": 1, "timeout": 1}
NETWORK = {"interval": 2, "timeout": 1}
DISK = {"interval": 10, "timeout": 5}
GPU = {"name": "gpu", "type": "gpu", "interval": 10, "timeout": 5}
PROGRESS = {"name": "training", "type": "progress", "interval": 5, "timeout": 2}


@dataclass
class Filesystem:
    """A filesystem some named paths live on: where it is mounted, where the daemon writes."""

    mount: str
    probe_dir: str
    paths: list[str] = field(default_factory=list)


@dataclass
class Node:
    """What the plan is made from: every field is read on the node (see the readers below)."""

    cloud: str = "none"
    cloud_evidence: str = ""
    metadata_url: str = ""
    metadata_answer: str = ""  # what the service said, or why it did not answer
    metadata_ok: bool = False
    bond_peer: str = ""
    gateway: str = ""
    icmp_closed: str = ""  # why the daemon may not send ICMP echo, if it may not
    filesystems: list[Filesystem] = field(default_factory=list)
    nvidia: list[str] = field(default_factory=list)
    nvml: bool = False  # the daemon can read NVML (heartbeat_nvml_enabled)


@dataclass
class Plan:
    """The probes with why each was chosen, what is not watched, what is missing."""

    probes: list[dict[str, Any]] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    unwatched: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def add(self, probe: dict[str, Any], why: str) -> None:
        self.probes.append(probe)
        self.reasons[probe["name"]] = why


def compose(node: Node) -> dict[str, Any]:
    """{probes, reasons (one per probe), unwatched, missing}; missing is what verify fails on."""
    plan = Plan()
    _cloud(node, plan)
    _network(node, plan)
    _disks(node, plan)
    if node.nvidia and node.nvml:
        plan.add(dict(GPU), f"NVIDIA PCI device(s) {', '.join(node.nvidia)}")
    elif node.nvidia:
        plan.unwatched.append(
            f"GPUs: NVIDIA PCI device(s) {', '.join(node.nvidia)}, but heartbeat_nvml_enabled "
            "is false (a GPU probe would only skip); enable it"
        )
    else:
        plan.unwatched.append("GPUs: no NVIDIA PCI device")
    plan.add(dict(PROGRESS), "registered trainers' steps (a trainer that stops stepping is hung)")
    return {"probes": plan.probes, "reasons": plan.reasons, "unwatched": plan.unwatched,
            "missing": plan.missing}  # fmt: skip


def _cloud(node: Node, plan: Plan) -> None:
    if node.cloud == "none":
        plan.unwatched.append(f"cloud metadata and notices: not a cloud VM ({node.cloud_evidence})")
    elif node.metadata_ok:
        where = {"provider": node.cloud, "url": node.metadata_url}
        plan.add({"name": "metadata", "type": "imds", **where, **METADATA},
                 f"{A_VM[node.cloud]} ({node.cloud_evidence}); {node.metadata_answer}")  # fmt: skip
        plan.add({"name": "cloud-notice", "type": "spot_notice", **where, **NOTICES},
                 f"{LABELS[node.cloud]}'s spot, preemption and maintenance notices, polled "
                 "every second")  # fmt: skip
    else:
        plan.missing.append(
            f"this is {A_VM[node.cloud]} ({node.cloud_evidence}) but its metadata service did not "
            f"answer: {node.metadata_answer}; its spot and maintenance notices go unwatched"
        )


def _network(node: Node, plan: Plan) -> None:
    if (node.bond_peer or node.gateway) and node.icmp_closed:
        plan.unwatched.append(f"the network: {node.icmp_closed}")
    elif node.bond_peer:
        plan.add({"name": "bond-peer", "type": "icmp", "host": node.bond_peer, **NETWORK},
                 "the bond's peer (nic_bond_probe_target)")  # fmt: skip
    elif node.gateway:
        plan.add({"name": "gateway", "type": "icmp", "host": node.gateway, **NETWORK},
                 "the default route's gateway")  # fmt: skip
    else:
        plan.unwatched.append("the network: no bond peer and no IPv4 default route")


def _disks(node: Node, plan: Plan) -> None:
    for disk in node.filesystems:
        named = ", ".join(disk.paths)
        if (disk.mount.rstrip("/") + "/").startswith(HIDDEN):
            plan.unwatched.append(
                f"{disk.mount}, which holds {named}: the service's ProtectHome hides it from "
                "the daemon; keep checkpoints and data off /home and /root"
            )
            continue
        stem = "root" if disk.mount == "/" else disk.mount.strip("/").replace("/", "-")
        while f"{stem}-write" in plan.reasons:
            stem += "-"
        plan.add({"name": f"{stem}-write", "type": "writable", "path": disk.probe_dir, **DISK},
                 f"writes on {disk.mount}, which holds {named}")  # fmt: skip
        plan.add({"name": f"{stem}-space", "type": "free_space", "path": disk.mount, **DISK},
                 f"free space on {disk.mount}, which holds {named}")  # fmt: skip
    if not node.filesystems:
        plan.unwatched.append("disks: the inventory names no checkpoint or data path")


def default_gateway(route_table: str = ROUTE_TABLE) -> str:
    """The IPv4 default route's gateway with the lowest metric, or ''."""
    best: tuple[int, str] | None = None
    try:
        with open(route_table, encoding="ascii") as handle:
            rows = [line.split() for line in handle.read().splitlines()[1:]]
    except OSError:
        return ""
    for row in rows:
        if len(row) < 7 or row[1] != "00000000" or not int(row[3], 16) & 0x2:
            continue
        raw = int(row[2], 16)
        address = ".".join(str((raw >> shift) & 0xFF) for shift in (0, 8, 16, 24))
        if best is None or int(row[6]) < best[0]:
            best = (int(row[6]), address)
    return best[1] if best else ""


def icmp_closed(gid: int | None, range_file: str = PING_GROUP_RANGE) -> str:
    """Why group GID may not open the unprivileged ICMP socket the daemon pings with, or ''
    (a group not created yet, whose id is unknown, only where the range admits every group)."""
    try:
        with open(range_file, encoding="ascii") as handle:
            low, high = (int(part) for part in handle.read().split())
    except (OSError, ValueError):
        return ""
    if gid is None and low == 0 and high >= MAX_GID:
        return ""
    if gid is not None and low <= gid <= high:
        return ""
    who = "any group" if gid is None else f"the daemon's group (gid {gid})"
    return (
        f"ICMP echo is closed to {who} (net.ipv4.ping_group_range is '{low} {high}'); open "
        "it with sysctl, or list a tcp probe in heartbeat_probes"
    )


def nvidia_devices(pci_devices: str = PCI_DEVICES) -> list[str]:
    """PCI addresses of NVIDIA display and 3D controllers."""
    found = []
    for device in sorted(glob.glob(os.path.join(pci_devices, "*"))):
        if _read(device, "vendor") == NVIDIA_VENDOR and _read(device, "class").startswith("0x03"):
            found.append(os.path.basename(device))
    return found


def _read(directory: str, name: str) -> str:
    try:
        with open(os.path.join(directory, name), encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def mount_of(path: str) -> str:
    """The mount point of PATH's filesystem, symbolic links resolved; a path not there yet is
    judged by its nearest existing parent (a checkpoint directory the trainer will create)."""
    path = os.path.realpath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def filesystems(paths: list[str]) -> list[Filesystem]:
    """The filesystems PATHS live on, in the order first named, each with its probe dir."""
    found: dict[str, Filesystem] = {}
    for path in paths:
        mount = mount_of(path)
        if mount not in found:
            found[mount] = Filesystem(mount, _probe_dir(mount))
        if path not in found[mount].paths:
            found[mount].paths.append(path)
    return list(found.values())


def _probe_dir(mount: str) -> str:
    """Where the daemon writes to prove MOUNT writable (the role creates it for the daemon):
    /var/lib/nodeprep-heartbeat for the root filesystem where /var/lib is on it."""
    if mount == "/" and mount_of(ROOT_PROBE_DIR) == "/":
        return ROOT_PROBE_DIR
    return os.path.join(mount, PROBE_DIR)
