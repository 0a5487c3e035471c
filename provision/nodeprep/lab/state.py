"""The running lab's record: which nodes exist, their ports and qemu PIDs.

It is written before each qemu starts and after each change, so `lab down` can end exactly
the processes this lab started, even after a crash half-way through `lab up`.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nodeprep.lab.errors import LabError, LabInputError
from nodeprep.lab.node import Link, NodeFiles

STATE_FILE = "lab.json"


@dataclass
class NodeRecord:
    """One node: name, forwarded SSH port, qemu PID (0 before it starts), directory, the
    wires of its bond segments to its neighbours ([nic, local UDP port, remote UDP port]) and
    whether the segments' gateway (slirp) lives in its qemu."""

    name: str
    ssh_port: int
    directory: str
    pid: int = 0
    links: list[list[str | int]] = field(default_factory=list)
    gateway: bool = True

    @property
    def files(self) -> NodeFiles:
        return NodeFiles(Path(self.directory))

    @property
    def wires(self) -> tuple[Link, ...]:
        return tuple(Link(str(nic), int(local), int(remote)) for nic, local, remote in self.links)


@dataclass
class LabState:
    """The whole lab, as recorded in <lab dir>/lab.json."""

    distro: str
    image: str
    accel: str
    key: str
    nodes: list[NodeRecord] = field(default_factory=list)
    peer_pid: int = 0  # the segment peer of a wired lab (peer.py); 0 for none

    def node(self, name: str) -> NodeRecord:
        for record in self.nodes:
            if record.name == name:
                return record
        known = ", ".join(record.name for record in self.nodes) or "none"
        raise LabInputError(f"No lab node named {name!r}; running nodes: {known}.")


def load_state(lab: Path) -> LabState | None:
    """The recorded lab, or None when there is none."""
    path = lab / STATE_FILE
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
        nodes = [NodeRecord(**node) for node in raw.pop("nodes")]
        return LabState(nodes=nodes, **raw)
    except (ValueError, TypeError, KeyError) as error:
        raise LabError(
            f"{path} is unreadable ({error}); remove the lab directory by hand."
        ) from error


def save_state(lab: Path, state: LabState) -> None:
    """Write the record atomically, so a crash never leaves half a file."""
    lab.mkdir(parents=True, exist_ok=True)
    path = lab / STATE_FILE
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(asdict(state), indent=2) + "\n")
    os.replace(scratch, path)
