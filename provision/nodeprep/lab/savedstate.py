"""A booted node frozen to files, so every later node starts from it in seconds.

Saving: boot a template node to a settled system, `stop`, `migrate` its RAM and device
state to a file, and keep its overlay disks as the snapshot disks. Restoring: fresh overlays
on the snapshot disks, qemu with `-incoming`, then `cont`. The hardware must match exactly,
so the cache key includes the machine shape, the acceleration and the qemu version.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodeprep.lab.errors import LabError
from nodeprep.lab.image import Image
from nodeprep.lab.node import (
    Link,
    Machine,
    NodeFiles,
    console_tail,
    is_our_qemu,
    make_overlay,
    qemu_argv,
    start_qemu,
    stop_qemu,
)
from nodeprep.lab.proc import run_quiet
from nodeprep.lab.qmp import connect
from nodeprep.lab.ssh import SshTarget, run_ssh, wait_for_ssh

log = logging.getLogger(__name__)
BOOT_TIMEOUT_S = 900.0
SETTLE_TIMEOUT_S = 180


@dataclass(frozen=True)
class SavedState:
    """The files of a saved node: RAM/device state and the two snapshot disks."""

    directory: Path

    @property
    def vmstate(self) -> Path:
        return self.directory / "vmstate"

    @property
    def root(self) -> Path:
        return self.directory / "root.qcow2"

    @property
    def data(self) -> Path:
        return self.directory / "data.qcow2"


def state_key(image: Image, machine: Machine) -> str:
    """Image digest + machine shape + qemu version and device layout: a restore must match all.

    The layout is the node command line with placeholder paths, so a change to the virtual
    hardware in a later nodeprep never restores a state saved on the old one.
    """
    version = run_quiet(["qemu-system-x86_64", "--version"], "qemu version").splitlines()[0]
    layout = qemu_argv(NodeFiles(Path("/node")), machine, Path("/kernel"), Path("/initrd"), 0)
    suffix = hashlib.sha256("\0".join([version, *layout]).encode()).hexdigest()[:8]
    return f"{image.digest}-{machine.key()}-{suffix}"


def cached_state(image: Image, machine: Machine, cache: Path) -> SavedState | None:
    saved = SavedState(cache / "states" / state_key(image, machine))
    return saved if saved.vmstate.is_file() else None


def _no_record(pid: int) -> None:
    """Default for on_start: the caller keeps no record of the PID."""


def _await_ssh(pid: int, files: NodeFiles, target: SshTarget, what: str) -> None:
    """Wait for SSH; on any failure or interruption end this qemu before re-raising."""
    try:
        wait_for_ssh(target, BOOT_TIMEOUT_S, alive=lambda: is_our_qemu(pid, files))
    except LabError as error:
        stop_qemu(pid, files)
        raise LabError(f"{what} failed: {error}\n{console_tail(files)}") from error
    except BaseException:
        stop_qemu(pid, files)
        raise


def boot_fresh(
    image: Image, machine: Machine, files: NodeFiles, port: int, *,
    on_start: Callable[[int], None] = _no_record, links: tuple[Link, ...] = (),
    gateway: bool = True,
) -> tuple[int, float]:  # fmt: skip
    """Boot a node from the image itself; return its PID and the seconds to SSH."""
    files.directory.mkdir(parents=True, exist_ok=True)
    make_overlay(image.root, files.root)
    make_overlay(image.data, files.data)
    started = time.monotonic()
    argv = qemu_argv(files, machine, image.kernel, image.initrd, port, links=links,
                     gateway=gateway)  # fmt: skip
    pid = start_qemu(argv, files)
    on_start(pid)
    _await_ssh(pid, files, SshTarget(port, image.bootstrap_key), "booting to SSH")
    return pid, time.monotonic() - started


def restore_node(
    image: Image, machine: Machine, saved: SavedState, files: NodeFiles, port: int, *,
    on_start: Callable[[int], None] = _no_record, links: tuple[Link, ...] = (),
    gateway: bool = True,
) -> tuple[int, float]:  # fmt: skip
    """Start a node from the saved state; return its PID and the seconds to SSH."""
    files.directory.mkdir(parents=True, exist_ok=True)
    make_overlay(saved.root, files.root)
    make_overlay(saved.data, files.data)
    started = time.monotonic()
    argv = qemu_argv(files, machine, image.kernel, image.initrd, port, incoming=saved.vmstate,
                     links=links, gateway=gateway)  # fmt: skip
    pid = start_qemu(argv, files)
    on_start(pid)
    try:
        with connect(files.qmp) as qmp:
            qmp.wait_migration(BOOT_TIMEOUT_S)
            qmp.execute("cont")
    except BaseException:
        stop_qemu(pid, files)
        raise
    _await_ssh(pid, files, SshTarget(port, image.bootstrap_key), "restoring the saved state")
    return pid, time.monotonic() - started


def ensure_saved_state(image: Image, machine: Machine, cache: Path, port: int) -> SavedState:
    """The cached saved state, creating it (one boot, ~1 min under TCG) when missing."""
    found = cached_state(image, machine, cache)
    if found is not None:
        log.info("saved state found in cache %s", found.directory)
        return found
    (cache / "states").mkdir(parents=True, exist_ok=True)
    with (cache / "states" / f"{state_key(image, machine)}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = cached_state(image, machine, cache)
        return found if found is not None else _save(image, machine, cache, port)


def _save(image: Image, machine: Machine, cache: Path, port: int) -> SavedState:
    final = cache / "states" / state_key(image, machine)
    work = final.with_name(final.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    files = NodeFiles(work)
    log.info("booting a template node to save its state (%s)", machine.accel)
    try:
        pid, seconds = boot_fresh(image, machine, files, port)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    try:
        log.info("template node reached SSH in %.1f s; waiting for boot to settle", seconds)
        settle = f"timeout {SETTLE_TIMEOUT_S} systemctl is-system-running --wait; sync"
        run_ssh(SshTarget(port, image.bootstrap_key), settle, timeout_s=SETTLE_TIMEOUT_S + 10)
        with connect(files.qmp) as qmp:
            qmp.execute("stop")
            started = time.monotonic()
            qmp.execute("migrate", {"uri": f"exec:cat > {SavedState(work).vmstate}"})
            qmp.wait_migration(300)
            log.info("state saved in %.1f s", time.monotonic() - started)
            qmp.execute("quit")
    except BaseException:
        stop_qemu(pid, files)
        shutil.rmtree(work, ignore_errors=True)
        raise
    stop_qemu(pid, files)
    for leftover in (files.qmp, files.console, files.qemu_log):
        leftover.unlink(missing_ok=True)
    work.rename(final)
    return SavedState(final)
