"""The host-side file server for lab nodes, and the reverse tunnel's ssh command line."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from nodeprep.lab.fileserve import serve_directory, tunnel_argv
from nodeprep.lab.ssh import SshTarget


def test_serves_files_on_loopback_and_stops(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("payload")
    with serve_directory(tmp_path) as port:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/a.txt", timeout=5) as answer:
            assert answer.read() == b"payload"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/missing", timeout=5)
        assert missing.value.code == 404
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_tunnel_listens_on_the_guest_loopback_only() -> None:
    argv = tunnel_argv(SshTarget(2222, Path("/k")), guest_port=18080, host_port=40000)
    assert argv[argv.index("-R") + 1] == "127.0.0.1:18080:127.0.0.1:40000"
    assert "ExitOnForwardFailure=yes" in argv
    assert argv[-1] == "nodeprep@127.0.0.1"
    assert "-N" in argv
    assert "ServerAliveCountMax=3" in argv  # 15 s of silence ends it
    patient = tunnel_argv(SshTarget(2222, Path("/k")), 18080, 40000, alive_count=12)
    assert "ServerAliveCountMax=12" in patient
