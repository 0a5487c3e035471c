"""The daemon as a real process: READY, keep-alives that stop when it is frozen, clean stop."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hb_endpoints import Endpoint


def _recv_all(sock: socket.socket, seconds: float) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            got.append(sock.recv(4096))
        except TimeoutError:
            break
    return got


@pytest.fixture
def notified_daemon(
    endpoint: Endpoint, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[str], socket.socket]]:
    """The daemon as a subprocess with NOTIFY_SOCKET on a socket the test reads."""
    probe = {
        "name": "web",
        "type": "http",
        "url": f"{endpoint.url}/",
        "interval": 0.5,
        "timeout": 0.3,
    }
    cfg = tmp_path / "hb.json"
    cfg.write_text(json.dumps({"registry_dir": str(tmp_path / "trainers"), "probes": [probe]}))
    sock_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodeprep.heartbeat", "--config", str(cfg)],
        env=dict(os.environ, NOTIFY_SOCKET=sock_path, WATCHDOG_USEC="600000"),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc, sock
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()


def test_daemon_process_notifies_systemd_and_stops_pinging_when_frozen(
    notified_daemon: tuple[subprocess.Popen[str], socket.socket],
) -> None:
    proc, sock = notified_daemon
    sock.settimeout(10)
    assert sock.recv(4096).startswith(b"READY=1\n")
    assert _recv_all(sock, 1.0).count(b"WATCHDOG=1") >= 3
    os.kill(proc.pid, signal.SIGSTOP)
    time.sleep(0.1)
    _recv_all(sock, 0.05)
    assert b"WATCHDOG=1" not in _recv_all(sock, 1.0)
    os.kill(proc.pid, signal.SIGCONT)
    assert b"WATCHDOG=1" in _recv_all(sock, 1.0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    assert b"STOPPING=1" in _recv_all(sock, 0.5)
    assert proc.stderr is not None
    log = proc.stderr.read()
    assert "heartbeat started: probes web(http)" in log
    assert "heartbeat stopped" in log


def test_node_side_imports_nothing_controller_side() -> None:
    code = (
        "import sys, nodeprep.heartbeat.__main__, nodeprep.heartbeat.daemon\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'torch', 'ansible', 'ansible_runner', 'click', 'rich', 'jinja2', 'pynvml'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    assert out.stdout.strip() == ""
