"""Single attempts against real local servers: every mode gives the right outcome in time."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hb_endpoints import Endpoint

from nodeprep.heartbeat import probes
from nodeprep.heartbeat.config import ProbeConfig


def _cfg(kind: str, **kw: object) -> ProbeConfig:
    base: dict[str, object] = {
        "name": kind,
        "type": kind,
        "interval": 1.0,
        "timeout": 0.5,
        "fail_threshold": 3,
        "recover_threshold": 2,
    }
    base.update(kw)
    return ProbeConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mode", "ok", "evidence"),
    [
        ("ok", True, "HTTP 200"),
        ("slow", True, "HTTP 200"),
        ("error", False, "HTTP 503"),
        ("refuse", False, "connection refused"),
        ("hang", False, "timed out"),
    ],
)
def test_http_modes(endpoint: Endpoint, mode: str, ok: bool, evidence: str) -> None:
    endpoint.set_mode(mode)
    attempt = probes.http_attempt(_cfg("http", url=f"{endpoint.url}/health"))
    started = time.monotonic()
    out = attempt()
    assert out.ok is ok
    assert evidence in out.evidence
    assert time.monotonic() - started < 5  # bounded by the 0.5 s timeout, not the 30 s hang
    if mode == "slow":
        assert out.latency_s >= endpoint.slow_s


def test_imds_token_flow_reuses_token_and_refreshes_on_401(endpoint: Endpoint) -> None:
    attempt = probes.imds_attempt(_cfg("imds", url=endpoint.url, path="/latest/meta-data/"))
    assert attempt().ok
    assert attempt().ok
    assert endpoint.token_puts == 1
    endpoint.tokens.clear()  # the service forgot the session: GET answers 401
    out = attempt()
    assert out.ok, out.evidence
    assert endpoint.token_puts == 2
    endpoint.set_mode("error")
    assert "HTTP 503" in attempt().evidence


def test_imds_without_token_service_fails(endpoint: Endpoint) -> None:
    endpoint.set_mode("refuse")
    out = probes.imds_attempt(_cfg("imds", url=endpoint.url, path="/latest/meta-data/"))()
    assert not out.ok
    assert "connection refused" in out.evidence


@pytest.mark.parametrize(
    ("mode", "ok", "notice", "evidence"),
    [
        ("ok", True, False, "no spot or maintenance notice"),
        ("spot", False, True, 'spot instance-action notice: {"action": "terminate"'),
        ("events", False, True, "scheduled event notice: system-reboot at soon"),
        ("error", False, False, "HTTP 503"),
        ("hang", False, False, "timed out"),
    ],
)
def test_spot_and_events(
    endpoint: Endpoint, mode: str, ok: bool, notice: bool, evidence: str
) -> None:
    endpoint.set_mode(mode)
    out = probes.spot_attempt(_cfg("spot_notice", url=endpoint.url))()
    assert (out.ok, out.notice) == (ok, notice)
    assert evidence in out.evidence


def test_tcp_ok_refused_and_full_backlog(endpoint: Endpoint) -> None:
    cfg = _cfg("tcp", host="127.0.0.1", port=endpoint.port)
    assert probes.tcp_attempt(cfg)().ok
    endpoint.set_mode("refuse")
    out = probes.tcp_attempt(cfg)()
    assert not out.ok
    assert "connection refused" in out.evidence


@pytest.fixture
def full_backlog() -> Iterator[int]:
    """A listener that never accepts, its queue filled: a new connect hangs (SYN dropped)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    fillers = []
    port = server.getsockname()[1]
    for _ in range(4):
        client = socket.socket()
        client.setblocking(False)
        client.connect_ex(("127.0.0.1", port))
        fillers.append(client)
    time.sleep(0.1)
    try:
        yield port
    finally:
        for client in fillers:
            client.close()
        server.close()


def test_tcp_connect_that_hangs_is_bounded_by_timeout(full_backlog: int) -> None:
    out = probes.tcp_attempt(_cfg("tcp", host="127.0.0.1", port=full_backlog))()
    assert not out.ok
    assert "timed out" in out.evidence
    assert 0.4 < out.latency_s < 5


def test_writable_path(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    target.mkdir()
    cfg = _cfg("writable", path=str(target))
    assert probes.writable_attempt(cfg)().ok
    assert list(target.iterdir()) == []
    target.rmdir()
    target.write_text("not a directory any more")
    out = probes.writable_attempt(cfg)()
    assert not out.ok
    assert f"write {target}: Not a directory" == out.evidence


ICMP_IN_NETNS = """
import json, sys
from nodeprep.heartbeat import probes
from nodeprep.heartbeat.config import ProbeConfig
cfg = ProbeConfig(name="peer", type="icmp", interval=1.0, timeout=0.5, fail_threshold=3,
                  recover_threshold=2, host=sys.argv[1])
out = probes.icmp_attempt(cfg)()
print(json.dumps({"ok": out.ok, "evidence": out.evidence, "latency_s": out.latency_s}))
"""


def _icmp_in_netns(host: str, *sysctls: str) -> dict[str, object]:
    """One icmp attempt inside a network namespace of its own (loopback only), as root."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a network namespace of the test's own")
    settings = "".join(f"sysctl -qw {s} && " for s in sysctls)
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", f'ip link set lo up && {settings}exec "$0" -c "$1" "$2"',
         sys.executable, ICMP_IN_NETNS, host],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_icmp_reply_lost_reply_and_forbidden_in_a_namespace() -> None:
    # A datagram ICMP socket, allowed for group 0 in this namespace: the echo is answered.
    out = _icmp_in_netns("127.0.0.1", "net.ipv4.ping_group_range='0 0'")
    assert out["ok"], out
    assert out["evidence"] == "ping 127.0.0.1: reply"
    # The kernel ignores echo requests: no reply, bounded by the timeout.
    out = _icmp_in_netns(
        "127.0.0.1", "net.ipv4.ping_group_range='0 0'", "net.ipv4.icmp_echo_ignore_all=1"
    )
    assert not out["ok"], out
    assert out["evidence"] == "ping 127.0.0.1: no reply within 0.5 s"
    assert 0.4 < float(str(out["latency_s"])) < 5
    # A group outside net.ipv4.ping_group_range may not open the socket: said, with the range.
    out = _icmp_in_netns("127.0.0.1", "net.ipv4.ping_group_range='1 0'")
    assert not out["ok"], out
    assert "may not send ICMP echo (net.ipv4.ping_group_range is '1 0'" in str(out["evidence"])
    # No route to the address: the kernel's own words.
    out = _icmp_in_netns("10.77.0.9", "net.ipv4.ping_group_range='0 0'")
    assert not out["ok"], out
    assert "unreachable" in str(out["evidence"]), out
