"""Bring a whole lab up and down: image, acceleration, saved state, nodes, record, inventory.

Every qemu PID is recorded before anything else can fail, and a failed `up` tears down what
it started, so no run leaves a VM behind.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodeprep.lab.accel import choose_accel
from nodeprep.lab.errors import LabError, LabInputError
from nodeprep.lab.faults import allow_reboots
from nodeprep.lab.image import Image, ensure_image
from nodeprep.lab.inventory import render_ini
from nodeprep.lab.node import (
    BOND_NICS,
    Machine,
    NodeFiles,
    stop_qemu,
)
from nodeprep.lab.peer import PROGRAM as PEER_PROGRAM
from nodeprep.lab.proc import run_quiet
from nodeprep.lab.qmp import connect
from nodeprep.lab.recipe import GUEST_USER, Recipe
from nodeprep.lab.savedstate import SavedState, boot_fresh, ensure_saved_state, restore_node
from nodeprep.lab.ssh import SshTarget, run_ssh, wait_for_ssh
from nodeprep.lab.state import LabState, NodeRecord, load_state, save_state

log = logging.getLogger(__name__)
MAX_NODES = 8
RESTORE_TIMEOUT_S = 180.0
INVENTORY_FILE = "inventory.ini"


@dataclass(frozen=True)
class UpRequest:
    """What `lab up` was asked for."""

    nodes: int = 1
    distro: str = "trixie"
    memory_mb: int = 1024
    cpus: int = 2
    fresh: bool = False

    def validate(self) -> None:
        if not 1 <= self.nodes <= MAX_NODES:
            raise LabInputError(f"--nodes {self.nodes} is out of range; use 1 to {MAX_NODES}.")
        if not 512 <= self.memory_mb <= 16384:
            raise LabInputError(f"--memory {self.memory_mb} MiB is out of range; use 512 to 16384.")
        if not 1 <= self.cpus <= 8:
            raise LabInputError(f"--cpus {self.cpus} is out of range; use 1 to 8.")
        Recipe(self.distro)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def free_udp_ports(count: int) -> list[int]:
    """COUNT distinct UDP ports on 127.0.0.1 that are free right now."""
    probes = []
    try:
        for _ in range(count):
            probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            probes.append(probe)
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def wire_nodes(records: list[NodeRecord]) -> list[tuple[int, int]]:
    """Wire each node's bond segments to the next node's (a chain: no loops, every node
    reaches every other), one UDP port pair per segment and neighbour, and node1's to the
    segment peer (peer.py), which takes slirp's place as the gateway. Returns the peer's
    (local, remote) port pairs; none for a single node, which keeps its slirp."""
    if len(records) < 2:
        return []
    pairs = list(itertools.pairwise(records))
    ports = iter(free_udp_ports(2 * len(BOND_NICS) * (len(pairs) + 1)))
    for left, right in pairs:
        for nic in BOND_NICS:
            a, b = next(ports), next(ports)
            left.links.append([nic, a, b])
            right.links.append([nic, b, a])
    peer: list[tuple[int, int]] = []
    for nic in BOND_NICS:
        a, b = next(ports), next(ports)
        records[0].links.append([nic, a, b])
        peer.append((b, a))
    for record in records:
        record.gateway = False
    return peer


def start_peer(lab: Path, pairs: list[tuple[int, int]]) -> int:
    """Start the segment peer in its own session; return its PID."""
    argv = [sys.executable, "-m", PEER_PROGRAM, *(f"{a}:{b}" for a, b in pairs)]
    with (lab / "peer.log").open("ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, close_fds=True)  # fmt: skip
    return proc.pid


def stop_peer(pid: int) -> bool:
    """End the segment peer by PID, once its command line says it is one."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if PEER_PROGRAM.encode() not in cmdline:
        return False
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.02)
    return True


def lab_key(lab: Path) -> Path:
    """This lab's own SSH key, created on first use."""
    key = lab / "id_ed25519"
    if not key.is_file():
        lab.mkdir(parents=True, exist_ok=True)
        run_quiet(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "nodeprep-lab", "-f", str(key)],
            "ssh-keygen",
        )
    return key


def up(request: UpRequest, lab: Path, cache: Path) -> LabState:
    """Start the lab; on any failure, end what was started and re-raise."""
    request.validate()
    existing = load_state(lab)
    if existing is not None and existing.nodes:
        raise LabInputError(f"A lab is already running in {lab}; run `nodeprep lab down` first.")
    image = ensure_image(Recipe(request.distro), cache)
    machine = Machine(choose_accel(image.kernel), request.memory_mb, request.cpus)
    key = lab_key(lab)
    state = LabState(request.distro, image.digest, machine.accel, str(key))
    save_state(lab, state)
    try:
        saved = None if request.fresh else ensure_saved_state(image, machine, cache, free_port())
        records = [NodeRecord(f"node{index}", free_port(), str(lab / f"node{index}"))
                   for index in range(1, request.nodes + 1)]  # fmt: skip
        peer = wire_nodes(records)
        if peer:
            state.peer_pid = start_peer(lab, peer)
            save_state(lab, state)
        for record in records:
            state.nodes.append(record)
            _start_node(image, machine, saved, record, lambda: save_state(lab, state))
            _personalise(record, image, key)
        (lab / INVENTORY_FILE).write_text(render_ini(state))
    except BaseException:
        log.warning("lab up failed; removing what it started")
        down(lab)
        raise
    return state


def _start_node(
    image: Image, machine: Machine, saved: SavedState | None, record: NodeRecord,
    save: Callable[[], None],
) -> None:  # fmt: skip
    """Start one node; its PID is recorded the moment qemu exists."""

    def on_start(pid: int) -> None:
        record.pid = pid
        save()

    files = record.files
    if saved is None:
        _, seconds = boot_fresh(image, machine, files, record.ssh_port, on_start=on_start,
                                links=record.wires, gateway=record.gateway)  # fmt: skip
        log.info("%s booted to SSH in %.1f s", record.name, seconds)
    else:
        _, seconds = restore_node(image, machine, saved, files, record.ssh_port,
                                  on_start=on_start, links=record.wires,
                                  gateway=record.gateway)  # fmt: skip
        log.info("%s restored to SSH in %.1f s", record.name, seconds)
    with connect(files.qmp) as qmp:
        allow_reboots(qmp)


def _personalise(record: NodeRecord, image: Image, key: Path) -> None:
    """Set the clock (a restored guest lives in the past), the hostname and the lab's key."""
    pubkey = key.with_suffix(".pub").read_text().strip()
    script = (
        f"date -u -s @{time.time():.3f} >/dev/null && "
        f"echo {record.name} > /etc/hostname && hostname {record.name} && "
        f"sed -i 's/nodeprep-lab/{record.name}/' /etc/hosts && "
        f"printf '%s\\n' '{pubkey}' > /home/{GUEST_USER}/.ssh/authorized_keys"
    )
    done = run_ssh(SshTarget(record.ssh_port, image.bootstrap_key), f'sudo sh -c "{script}"')
    if done.returncode != 0:
        raise LabError(f"setting up {record.name} failed: {done.stderr.strip()}")
    wait_for_ssh(SshTarget(record.ssh_port, key), RESTORE_TIMEOUT_S)


def down(lab: Path) -> list[int]:
    """End this lab's qemu processes by PID and remove its directory; return the PIDs ended."""
    ended: list[int] = []
    state = load_state(lab)
    for record in state.nodes if state else []:
        if record.pid and stop_qemu(record.pid, NodeFiles(Path(record.directory))):
            ended.append(record.pid)
    if state is not None and state.peer_pid and stop_peer(state.peer_pid):
        ended.append(state.peer_pid)
    shutil.rmtree(lab, ignore_errors=True)
    return ended


def running_state(lab: Path) -> LabState:
    """The recorded lab, or a clear error when none is running."""
    state = load_state(lab)
    if state is None or not state.nodes:
        raise LabInputError(f"No lab is running in {lab}; start one with `nodeprep lab up`.")
    return state
