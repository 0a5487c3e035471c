"""Metrics textfile content and atomicity; sd_notify datagrams on a real unix socket."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hb_endpoints import Endpoint, http_probe
from hb_support import RunningDaemon, wait_for

from nodeprep.heartbeat import metrics
from nodeprep.heartbeat.sdnotify import Notifier
from nodeprep.heartbeat.state import State


def test_daemon_writes_prometheus_textfile(
    endpoint: Endpoint, run_daemon: Callable[..., RunningDaemon], tmp_path: Path
) -> None:
    prom = tmp_path / "heartbeat.prom"
    # A timeout of a whole interval: the up sample must not depend on how busy the machine is
    # (a 0.1 s timeout failed once on a CI machine building an image beside the tests).
    probe = http_probe(endpoint, 0.5, 0.5, 1)
    hb = run_daemon({"probes": [probe], "metrics": {"path": str(prom), "interval_s": 0.2}})
    wait_for(
        lambda: prom.exists() and 'probe_up{probe="web",type="http"} 1' in prom.read_text(),
        20,
        "an up sample",
    )
    endpoint.set_mode("error")
    wait_for(lambda: hb.trips, 5, "a trip")
    text = wait_for(
        lambda: 'actions_total{action="trip"} 1' in prom.read_text() and prom.read_text(),
        5,
        "the trip in the metrics",
    )
    assert 'nodeprep_heartbeat_probe_up{probe="web",type="http"} 0' in text
    assert 'nodeprep_heartbeat_node_state{state="failed"} 1' in text
    assert 'nodeprep_heartbeat_probe_state{probe="web",state="failed"} 1' in text
    assert "# TYPE nodeprep_heartbeat_probe_latency_seconds gauge" in text
    # write_to_textfile's temporary file (heartbeat.prom.PID.TID) never stays behind.
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("heartbeat.prom.")] == []


def test_reader_never_sees_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "m.prom"
    big = [
        metrics.ProbeReading(f"p{i}", "tcp", State.HEALTHY, True, 0.001 * i, 0) for i in range(400)
    ]
    snaps = {n: metrics.Snapshot(big[:n], State.HEALTHY) for n in (1, 400)}
    expected = {n: metrics.render(snap) for n, snap in snaps.items()}
    metrics.write(path, snaps[1])
    stop = threading.Event()
    seen: list[str] = []

    def read() -> None:
        while not stop.is_set():
            seen.append(path.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(300):
        metrics.write(path, snaps[400 if i % 2 else 1])
    stop.set()
    reader.join()
    assert len(seen) > 50
    assert set(seen) <= set(expected.values())
    assert len(set(seen)) == 2


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    try:
        yield path, sock
    finally:
        sock.close()


def test_sd_notify_datagrams(notify_socket: tuple[str, socket.socket]) -> None:
    path, sock = notify_socket
    note = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "3000000"})
    assert note.watchdog_s == 3.0
    assert note.ready("watching 2 probe(s)")
    assert sock.recv(4096) == b"READY=1\nSTATUS=watching 2 probe(s)"
    assert note.ping()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert note.stopping()
    assert sock.recv(4096) == b"STOPPING=1"


def test_sd_notify_abstract_socket_and_absent_socket() -> None:
    name = f"nodeprep-test-{threading.get_ident()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        assert Notifier({"NOTIFY_SOCKET": "@" + name}).ping()
        assert sock.recv(4096) == b"WATCHDOG=1"
    finally:
        sock.close()
    quiet = Notifier({})
    assert not quiet.enabled
    assert not quiet.ping()
    assert Notifier({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}).watchdog_s is None
    assert not Notifier({"NOTIFY_SOCKET": "/nonexistent/sock"}).ping()
