"""Serve files from the host to a lab node: an HTTP server on 127.0.0.1 plus a reverse tunnel.

The node's management NIC is user-mode networking with restrict=on, so the guest cannot open
connections to the host. `ssh -R` carries them instead: the guest fetches
http://127.0.0.1:<guest port>/FILE and sshd hands each connection back to the server on the
host's loopback. No traffic leaves the host and the VM.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from nodeprep.lab.errors import LabError
from nodeprep.lab.ssh import SSH_OPTIONS, SshTarget, run_ssh

log = logging.getLogger(__name__)


class _QuietHandler(SimpleHTTPRequestHandler):
    """Requests go to the log instead of stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http %s", format % args)


@contextlib.contextmanager
def serve_directory(directory: Path) -> Iterator[int]:
    """Serve `directory` read-only over HTTP on 127.0.0.1; yields the port."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="lab-fileserve", daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def tunnel_argv(
    target: SshTarget, guest_port: int, host_port: int, alive_count: int = 3
) -> list[str]:
    """ssh that listens on the guest's 127.0.0.1:guest_port and forwards to the host's port;
    it gives up after ``alive_count`` unanswered keepalives, 5 s apart."""
    return [
        "ssh", *SSH_OPTIONS, "-N", "-o", "ExitOnForwardFailure=yes",
        "-o", "ServerAliveInterval=5", "-o", f"ServerAliveCountMax={alive_count}",
        "-R", f"127.0.0.1:{guest_port}:127.0.0.1:{host_port}",
        "-i", str(target.key), "-p", str(target.port), f"{target.user}@{target.host}",
    ]  # fmt: skip


@contextlib.contextmanager
def reverse_tunnel(
    target: SshTarget,
    guest_port: int,
    host_port: int,
    timeout_s: float = 120.0,
    alive_count: int = 3,
) -> Iterator[subprocess.Popen[bytes]]:
    """Keep the tunnel up for the block; the ssh process is ended by its PID afterwards."""
    process = subprocess.Popen(
        tunnel_argv(target, guest_port, host_port, alive_count),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        _wait_listening(target, guest_port, process, timeout_s)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        if process.stderr is not None:
            process.stderr.close()


def _wait_listening(
    target: SshTarget, guest_port: int, process: subprocess.Popen[bytes], timeout_s: float
) -> None:
    probe = f"ss -Hltn 'sport = :{guest_port}' | grep -q LISTEN"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise LabError(f"The reverse tunnel to port {guest_port} ended: {err.strip()}")
        if run_ssh(target, probe, timeout_s=30).returncode == 0:
            return
        time.sleep(0.5)
    raise LabError(f"The reverse tunnel to the guest's port {guest_port} did not come up")
