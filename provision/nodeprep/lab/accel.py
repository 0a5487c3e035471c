"""Choose KVM when it really runs a guest, TCG otherwise.

Nested KVM on some hosts opens /dev/kvm fine and then spins forever before the guest's
first instruction. So the probe boots the image's kernel under KVM and requires its first
console line within a few seconds; silence means fall back to software emulation.
"""

from __future__ import annotations

import logging
import os
import select
import subprocess
import time
from pathlib import Path

from nodeprep.lab.errors import LabInputError

log = logging.getLogger(__name__)
ACCELS = ("kvm", "tcg")
KVM_DEVICE = Path("/dev/kvm")


def kvm_boots(kernel: Path, timeout_s: float = 6.0) -> bool:
    """True when a KVM guest prints its kernel banner within timeout_s."""
    if not os.access(KVM_DEVICE, os.R_OK | os.W_OK):
        log.info("no usable %s", KVM_DEVICE)
        return False
    argv = [
        "qemu-system-x86_64", "-accel", "kvm", "-cpu", "host", "-m", "256", "-nodefaults",
        "-display", "none", "-no-reboot", "-serial", "stdio", "-kernel", str(kernel),
        "-append", "console=ttyS0 earlyprintk=ttyS0 panic=-1",
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and b"Linux version" not in seen:
            ready, _, _ = select.select([proc.stdout], [], [], 0.2)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                seen += chunk
    finally:
        proc.kill()
        proc.wait()
    return b"Linux version" in seen


def choose_accel(kernel: Path) -> str:
    """$NODEPREP_LAB_ACCEL when set (kvm or tcg), else the probe's answer."""
    forced = os.environ.get("NODEPREP_LAB_ACCEL")
    if forced:
        if forced not in ACCELS:
            raise LabInputError(
                f"NODEPREP_LAB_ACCEL={forced!r} is not kvm or tcg; fix or unset it."
            )
        return forced
    started = time.monotonic()
    accel = "kvm" if kvm_boots(kernel) else "tcg"
    log.info("acceleration: %s (probed in %.1f s)", accel, time.monotonic() - started)
    return accel
