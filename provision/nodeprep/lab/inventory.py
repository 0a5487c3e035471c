"""The Ansible inventory of a running lab, so `nodeprep provision` can target it directly."""

from __future__ import annotations

import hashlib
import json
import random
import shlex
from pathlib import Path

from nodeprep.lab.node import BOND_PEER
from nodeprep.lab.recipe import GUEST_USER
from nodeprep.lab.state import LabState

GROUP = "lab"
# Guest names of the bond NICs and data disk: fixed by the PCI slots in node.qemu_argv.
GUEST_BOND_NICS = ("ens4", "ens5")
GUEST_DATA_DISK = "/dev/vdb"
GUEST_DATA_MOUNT = "/data"
# The bond's address on the lab's segments: node1 10.77.0.15/24, node2 .16, and so on (the
# nodes' segments are wired together, see node.Link).
BOND_HOST_BASE = 14
BOND_PREFIX = "10.77.0"


def bond_address(index: int) -> str:
    """The bond's address of node INDEX (from 1), without its prefix length."""
    return f"{BOND_PREFIX}.{BOND_HOST_BASE + index}"


# The smoke drill keeps its checkpoints on the data disk; checkpoint.newest verifies them.
SMOKE_CHECKPOINTS = f"{GUEST_DATA_MOUNT}/nodeprep-smoke/checkpoints"
SSH_COMMON_ARGS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
# A small data set the dataset role stages onto the data disk from the controller (the lab
# has no data server): deterministic bytes, so every lab's copy has the same sha256.
SAMPLE_DATASET = "sample"
SAMPLE_DEST = f"{GUEST_DATA_MOUNT}/datasets/{SAMPLE_DATASET}"
SAMPLE_SHARDS = 2
SAMPLE_SHARD_BYTES = 1 << 20


def _ini_value(value: str) -> str:
    return shlex.quote(value) if any(c in value for c in " '\"=#") else value


def node_roles_vars() -> dict[str, object]:
    """What each role needs to know of a lab node, so provision and verify exercise them all.

    The bond over both bond NICs, verified by a ping to the segment's peer; the data disk as
    a volume for volume_grow's guest step (a disk grown with `lab fault NODE disk-grow` is
    filled out); the node checks and the smoke drill's checkpoints on the data disk. The
    heartbeat composes its own probes from these (the bond's peer, writes and free space on
    the data disk, the trainers' progress; no cloud, no NVIDIA GPU). The sample data set is
    added by ``render_ini``, which knows the lab directory its shards are written to.
    """
    return {
        "nic_bond_members": list(GUEST_BOND_NICS),
        "nic_bond_ipv4_address": f"{bond_address(1)}/24",
        "nic_bond_probe_target": BOND_PEER,
        "volume_grow_volumes": [{"device": GUEST_DATA_DISK}],
        "node_checks_disk_paths": [
            {"path": GUEST_DATA_MOUNT, "min_size_gb": 0.9, "min_free_gb": 0.2}
        ],
        "node_checks_checkpoint_dirs": [SMOKE_CHECKPOINTS],
        "smoke_keep_checkpoints": SMOKE_CHECKPOINTS,
        # The drill trains on the staged sample data set, through the loader's worker processes.
        "smoke_data": SAMPLE_DEST,
        "smoke_workers": 2,
    }


def sample_datasets(directory: Path) -> list[dict[str, object]]:
    """The lab's data sets: SAMPLE_SHARDS shards written once into DIRECTORY (on the controller),
    staged by the dataset role to SAMPLE_DEST and verified as dataset.sample."""
    files: list[dict[str, object]] = []
    for shard in range(SAMPLE_SHARDS):
        path = directory / f"shard-{shard:03d}.bin"
        if not path.is_file() or path.stat().st_size != SAMPLE_SHARD_BYTES:
            directory.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".tmp")
            partial.write_bytes(
                random.Random(f"nodeprep-lab-{shard}").randbytes(SAMPLE_SHARD_BYTES)
            )
            partial.replace(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        files.append({"src": str(path), "sha256": digest, "size": SAMPLE_SHARD_BYTES,
                      "path": f"shards/{path.name}"})  # fmt: skip
    return [{"name": SAMPLE_DATASET, "dest": SAMPLE_DEST, "files": files}]


def render_ini(state: LabState) -> str:
    """An INI inventory: one host per node, reached through its forwarded port on loopback."""
    variables = {
        **node_roles_vars(),
        "datasets": sample_datasets(Path(state.key).parent / "datasets" / SAMPLE_DATASET),
    }
    roles = {key: json.dumps(value, separators=(",", ":")) if not isinstance(value, str) else value
             for key, value in variables.items()}  # fmt: skip
    lines = [f"[{GROUP}]"]
    for index, node in enumerate(state.nodes, start=1):
        host_vars = {
            "ansible_host": "127.0.0.1",
            "ansible_port": str(node.ssh_port),
            "ansible_user": GUEST_USER,
            "ansible_ssh_private_key_file": state.key,
            # Host-line values keep their types (a list stays a list); [vars] values are strings.
            "nodeprep_lab_bond_nics": json.dumps(list(GUEST_BOND_NICS)),
            "nodeprep_lab_bond_peer": BOND_PEER,
            "nodeprep_lab_data_disk": GUEST_DATA_DISK,
            # The login user's tmux sessions survive logout (the tmux role's linger step).
            "tmux_users": json.dumps([GUEST_USER]),
            **roles,
            # Per node: the bond's address, which a job's rendezvous and ranks use.
            "nic_bond_ipv4_address": f"{bond_address(index)}/24",
            "job_address": bond_address(index),
        }
        rendered = " ".join(f"{key}={_ini_value(value)}" for key, value in host_vars.items())
        lines.append(f"{node.name} {rendered}")
    group_vars = {
        "ansible_ssh_common_args": SSH_COMMON_ARGS,
        "ansible_python_interpreter": "/usr/bin/python3",
        # The lab logs in as an unprivileged user with passwordless sudo, as fleets often do.
        "ansible_become": "true",
        "nodeprep_lab_accel": state.accel,
    }
    lines += ["", f"[{GROUP}:vars]"]
    lines += [f"{key}={_ini_value(value)}" for key, value in group_vars.items()]
    return "\n".join(lines) + "\n"
