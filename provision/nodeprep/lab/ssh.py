"""SSH to lab nodes, bounded in time.

A paused or restoring guest behind slirp accepts the TCP connection and then never sends a
banner; ssh's ConnectTimeout does not cover that wait, so every call runs under timeout(1).
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nodeprep.lab.errors import LabError
from nodeprep.lab.recipe import GUEST_USER

log = logging.getLogger(__name__)
SSH_OPTIONS = (
    "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
    "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR",
    "-o", "IdentitiesOnly=yes",
)  # fmt: skip


@dataclass(frozen=True)
class SshTarget:
    """Where a node's sshd is reachable from the host."""

    port: int
    key: Path
    user: str = GUEST_USER
    host: str = "127.0.0.1"

    def argv(self, command: Sequence[str] = (), tty: bool = False) -> list[str]:
        """The ssh command line (without a time bound), for interactive use."""
        flags = ["-t"] if tty else []
        return [
            "ssh", *SSH_OPTIONS, *flags, "-i", str(self.key), "-p", str(self.port),
            f"{self.user}@{self.host}", *command,
        ]  # fmt: skip


def run_ssh(
    target: SshTarget, command: str, timeout_s: float = 30.0
) -> subprocess.CompletedProcess[str]:
    """Run a shell command on the node; the whole call is bounded by timeout_s."""
    argv = ["timeout", "--kill-after=2", str(timeout_s), *target.argv([command])]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def wait_for_ssh(
    target: SshTarget,
    timeout_s: float,
    alive: Callable[[], bool] = lambda: True,
    attempt_s: float = 8.0,
) -> float:
    """Wait until `true` runs over SSH; return the seconds waited.

    `alive` lets the caller stop early when qemu has died, instead of waiting out the deadline.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if not alive():
            raise LabError(f"qemu exited while waiting for SSH on port {target.port}")
        done = run_ssh(target, "true", timeout_s=attempt_s)
        if done.returncode == 0:
            return time.monotonic() - started
        last = done.stderr.strip() or f"exit {done.returncode}"
        time.sleep(0.3)
    raise LabError(f"SSH on 127.0.0.1:{target.port} not ready after {timeout_s:.0f} s ({last})")
