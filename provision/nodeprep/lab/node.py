"""One lab node: its qemu command line, its files, and starting and ending its process.

Each node boots from its own qcow2 overlays (root and data), so the cached image is never
written. qemu runs in its own session (setsid) in the background rather than -daemonize,
because a daemonized qemu made `migrate` to a file fail silently.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from nodeprep.lab.proc import run_quiet
from nodeprep.lab.recipe import BOND_MACS, MGMT_MAC, ROOT_LABEL

log = logging.getLogger(__name__)
BOND_NICS = ("b0", "b1")
# On a one-node lab both bond NICs sit on one segment (a qemu hub, as two ports of one
# switch) with one slirp as its gateway: it answers ping and ARP on either member, so the
# bond keeps a peer across a failover, and the backup member hears the active one's frames,
# which an ARP-monitored bond needs to count its backup as up. restrict=on keeps every
# packet inside qemu; nothing leaves for real host-external addresses.
BOND_SUBNET = "10.77.0.0/24"
BOND_PEER = "10.77.0.2"


@dataclass(frozen=True)
class Link:
    """One end of a wire between two nodes' segments of one bond NIC: UDP on 127.0.0.1.

    With links, the NIC's netdev is a qemu hub joining its wires, so the nodes of a lab
    share the bond's segments (a two-node job's ranks reach each other). Nodes are wired in a
    chain, so there is no loop, and node1 also to the segment peer (peer.py), which answers
    for the gateway in slirp's place. The hub and wires are back ends, not devices: a saved
    state restores under them unchanged.
    """

    nic: str
    local_port: int
    remote_port: int


@dataclass(frozen=True)
class Machine:
    """The virtual hardware; part of the saved-state key, since a restore must match it."""

    accel: str
    memory_mb: int = 1024
    cpus: int = 2

    def key(self) -> str:
        return f"{self.accel}-m{self.memory_mb}-c{self.cpus}"


@dataclass(frozen=True)
class NodeFiles:
    """The per-node files under the lab directory."""

    directory: Path

    @property
    def root(self) -> Path:
        return self.directory / "root.qcow2"

    @property
    def data(self) -> Path:
        return self.directory / "data.qcow2"

    @property
    def qmp(self) -> Path:
        return self.directory / "qmp.sock"

    @property
    def console(self) -> Path:
        return self.directory / "console.log"

    @property
    def qemu_log(self) -> Path:
        return self.directory / "qemu.log"


def make_overlay(backing: Path, overlay: Path) -> None:
    """A qcow2 overlay whose writes stay in `overlay`, leaving `backing` untouched."""
    run_quiet(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(backing),
         str(overlay)],
        "qemu-img create",
    )  # fmt: skip


def qemu_argv(
    files: NodeFiles, machine: Machine, kernel: Path, initrd: Path, ssh_port: int, *,
    incoming: Path | None = None, links: tuple[Link, ...] = (), gateway: bool = True,
) -> list[str]:  # fmt: skip
    """The full qemu command line for a node; identical apart from ports (and the wires
    between nodes, which are back ends) for save and restore."""
    accel = ["-accel", "kvm", "-cpu", "host"]
    if machine.accel == "tcg":
        accel = ["-accel", "tcg,thread=multi", "-cpu", "max"]
    argv = [
        "qemu-system-x86_64", "-name", files.directory.name, "-machine", "pc", *accel,
        "-smp", str(machine.cpus), "-m", str(machine.memory_mb),
        "-nodefaults", "-display", "none", "-vga", "none", "-no-reboot", "-rtc", "base=utc",
        "-serial", f"file:{files.console}",
        "-kernel", str(kernel), "-initrd", str(initrd),
        "-append", f"root=LABEL={ROOT_LABEL} rw console=ttyS0 panic=-1",
        "-qmp", f"unix:{files.qmp},server=on,wait=off",
        "-netdev", f"user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:{ssh_port}-:22",
        "-device", f"virtio-net-pci,netdev=mgmt,id=nic-mgmt,mac={MGMT_MAC},addr=0x3,romfile=",
    ]  # fmt: skip
    for slot, (nic, mac) in enumerate(zip(BOND_NICS, BOND_MACS, strict=True), start=4):
        argv += _segment(nic, slot - 4, [link for link in links if link.nic == nic], gateway)
        argv += [
            "-device",
            f"virtio-net-pci,netdev={nic},id=nic-{nic},mac={mac},addr={slot:#x},romfile=",
        ]  # fmt: skip
    argv += [
        "-drive", f"file={files.root},if=none,id=root0,format=qcow2,discard=unmap",
        "-device", "virtio-blk-pci,drive=root0,id=vroot,addr=0x6",
        "-drive", f"file={files.data},if=none,id=data0,format=qcow2,discard=unmap",
        "-device", "virtio-blk-pci,drive=data0,id=vdata,addr=0x7",
    ]  # fmt: skip
    if incoming is not None:
        argv += ["-incoming", f"exec:cat {incoming}"]
    return argv


def _segment(nic: str, hub: int, links: list[Link], gateway: bool) -> list[str]:
    """The netdevs behind one bond NIC: on a one-node lab a port of the one hub that joins
    both NICs and the slirp (added with the first NIC); with wires, a hub of the NIC's own
    wires and (with GATEWAY) its slirp."""
    if not links:
        if hub:
            return ["-netdev", f"hubport,id={nic},hubid=0"]
        return [
            "-netdev", f"user,id=bond-slirp,net={BOND_SUBNET},restrict=on",
            "-netdev", "hubport,id=bond-hub-slirp,hubid=0,netdev=bond-slirp",
            "-netdev", f"hubport,id={nic},hubid=0",
        ]  # fmt: skip
    argv: list[str] = []
    if gateway:
        argv += [
            "-netdev", f"user,id={nic}-slirp,net={BOND_SUBNET},restrict=on",
            "-netdev", f"hubport,id={nic}-hub-slirp,hubid={hub},netdev={nic}-slirp",
        ]  # fmt: skip
    for index, link in enumerate(links):
        wire = f"{nic}-wire{index}"
        argv += [
            "-netdev",
            f"dgram,id={wire},local.type=inet,local.host=127.0.0.1,"
            f"local.port={link.local_port},remote.type=inet,remote.host=127.0.0.1,"
            f"remote.port={link.remote_port}",
            "-netdev", f"hubport,id={nic}-hub-wire{index},hubid={hub},netdev={wire}",
        ]  # fmt: skip
    return [*argv, "-netdev", f"hubport,id={nic},hubid={hub}"]


def start_qemu(argv: list[str], files: NodeFiles) -> int:
    """Start qemu in its own session, in the background; return its PID."""
    files.qmp.unlink(missing_ok=True)
    with files.qemu_log.open("ab") as qemu_log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=qemu_log, stderr=qemu_log,
            start_new_session=True, close_fds=True,
        )  # fmt: skip
    log.info("started qemu %s (pid %d)", files.directory.name, proc.pid)
    return proc.pid


def _proc_view(pid: int) -> tuple[bytes, str] | None:
    """(cmdline, state letter) of a process, or None when it is gone."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return cmdline, stat.rsplit(")", 1)[-1].split()[0]


def is_our_qemu(pid: int, files: NodeFiles) -> bool:
    """True while `pid` is the qemu of this node (its QMP path on its command line)."""
    for _ in range(50):
        view = _proc_view(pid)
        if view is None or view[1] == "Z":
            return False
        # Right after exec the kernel shows an empty command line for a moment.
        if view[0]:
            return str(files.qmp).encode() in view[0]
        time.sleep(0.02)
    return False


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop_qemu(pid: int, files: NodeFiles, grace_s: float = 5.0) -> bool:
    """End this node's qemu by PID (TERM, then KILL); False when it was not running."""
    if not is_our_qemu(pid, files):
        _reap(pid)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap(pid)
        if not is_our_qemu(pid, files):
            return True
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    while is_our_qemu(pid, files):
        _reap(pid)
        time.sleep(0.05)
    return True


def console_tail(files: NodeFiles, lines: int = 15) -> str:
    """The end of the serial console and qemu's own log, for error messages."""
    parts = []
    for path in (files.qemu_log, files.console):
        if path.is_file():
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name}\n" + "\n".join(text))
    return "\n".join(parts)
