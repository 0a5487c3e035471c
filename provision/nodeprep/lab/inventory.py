"""The Ansible inventory of a running lab, so `nodeprep provision` can target it directly."""

from __future__ import annotations

import json
import shlex

from nodeprep.lab.node import BOND_PEER
from nodeprep.lab.recipe import GUEST_USER
from nodeprep.lab.state import LabState

GROUP = "lab"
# Guest names of the bond NICs and data disk: fixed by the PCI slots in node.qemu_argv.
GUEST_BOND_NICS = ("ens4", "ens5")
GUEST_DATA_DISK = "/dev/vdb"
SSH_COMMON_ARGS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"


def _ini_value(value: str) -> str:
    return shlex.quote(value) if any(c in value for c in " '\"=#") else value


def render_ini(state: LabState) -> str:
    """An INI inventory: one host per node, reached through its forwarded port on loopback."""
    lines = [f"[{GROUP}]"]
    for node in state.nodes:
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
