"""Single probe attempts: each returns an :class:`Outcome` and never raises.

An attempt is a plain blocking call bounded by the probe's timeout; the scheduler runs
every attempt in its own worker and stops waiting at the deadline, so a call that ignores
its timeout (a hung NFS write, a stalled resolver) still cannot stall the loop.
"""

from __future__ import annotations

import http.client
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from nodeprep.heartbeat import cloud_metadata
from nodeprep.heartbeat.config import ProbeConfig


@dataclass(frozen=True)
class Outcome:
    """The result of one attempt: ok, a failure, an immediate notice, or a skip with reason."""

    ok: bool
    evidence: str
    latency_s: float
    notice: bool = False
    skipped: bool = False


Attempt = Callable[[], Outcome]


def _timed(start: float, ok: bool, evidence: str, **kw: bool) -> Outcome:
    return Outcome(ok=ok, evidence=evidence, latency_s=time.monotonic() - start, **kw)


_describe = cloud_metadata.describe


def http_attempt(cfg: ProbeConfig) -> Attempt:
    """GET a URL and expect one of the configured statuses."""

    def attempt() -> Outcome:
        start = time.monotonic()
        try:
            status, _, _ = cloud_metadata.request(cfg.url, cfg.timeout)
        except (OSError, http.client.HTTPException) as err:
            return _timed(start, False, f"GET {cfg.url}: {_describe(err)}")
        ok = status in cfg.expect_status
        return _timed(start, ok, f"GET {cfg.url}: HTTP {status}")

    return attempt


def _metadata(cfg: ProbeConfig) -> cloud_metadata.Metadata:
    return cloud_metadata.client(cfg.provider, cfg.url, cfg.token_ttl)


def imds_attempt(cfg: ProbeConfig) -> Attempt:
    """The provider's metadata service answers a GET of the probe's path with 200."""
    service = _metadata(cfg)
    path = cfg.path or service.default_path

    def attempt() -> Outcome:
        start = time.monotonic()
        try:
            status, _ = service.get(path, cfg.timeout)
        except (OSError, http.client.HTTPException) as err:
            return _timed(start, False, f"metadata {path}: {_describe(err)}")
        return _timed(start, status == 200, f"metadata {path}: HTTP {status}")

    return attempt


def spot_attempt(cfg: ProbeConfig) -> Attempt:
    """A spot interruption, preemption or scheduled maintenance notice: an immediate trigger."""
    service = _metadata(cfg)

    def attempt() -> Outcome:
        start = time.monotonic()
        try:
            evidence, ok, notice = service.notices(cfg.timeout)
        except (OSError, http.client.HTTPException) as err:
            return _timed(start, False, f"metadata notices: {_describe(err)}")
        return _timed(start, ok, evidence, notice=notice)

    return attempt


def tcp_attempt(cfg: ProbeConfig) -> Attempt:
    """A TCP connect to host:port completes within the timeout."""

    def attempt() -> Outcome:
        start = time.monotonic()
        try:
            with socket.create_connection((cfg.host, cfg.port), timeout=cfg.timeout):
                pass
        except OSError as err:
            return _timed(start, False, f"connect {cfg.host}:{cfg.port}: {_describe(err)}")
        return _timed(start, True, f"connect {cfg.host}:{cfg.port}: ok")

    return attempt


PING_GROUP_RANGE = "/proc/sys/net/ipv4/ping_group_range"


def _ping_range() -> str:
    try:
        with open(PING_GROUP_RANGE, encoding="ascii") as handle:
            return " ".join(handle.read().split())
    except OSError:
        return "unreadable"


def _echo(family: int, address: tuple[object, ...], sequence: int, timeout: float) -> None:
    """One ICMP echo over an unprivileged datagram socket; returns on its reply, else raises.

    The kernel fills in the identifier and checksum of a datagram ICMP socket and hands it
    only the replies to its own requests, so no raw socket (CAP_NET_RAW) is needed; the
    daemon runs without it. Which groups may open one is net.ipv4.ping_group_range.
    """
    proto = socket.IPPROTO_ICMP if family == socket.AF_INET else socket.IPPROTO_ICMPV6
    request, reply = (8, 0) if family == socket.AF_INET else (128, 129)
    token = os.urandom(8)
    deadline = time.monotonic() + timeout
    with socket.socket(family, socket.SOCK_DGRAM, proto) as sock:
        header = bytes([request, 0, 0, 0, 0, 0]) + sequence.to_bytes(2, "big")
        sock.settimeout(timeout)
        sock.sendto(header + token, address)
        while True:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            data = sock.recv(1024)
            if len(data) >= 8 and data[0] == reply and data[8:16] == token:
                return


def icmp_attempt(cfg: ProbeConfig) -> Attempt:
    """An ICMP echo to host is answered within the timeout (a gateway, a bond's peer)."""
    sequence = 0

    def attempt() -> Outcome:
        nonlocal sequence
        sequence = (sequence + 1) % 65536
        start = time.monotonic()
        try:
            family, _, _, _, address = socket.getaddrinfo(cfg.host, None, type=socket.SOCK_DGRAM)[0]
            _echo(family, address, sequence, cfg.timeout)
        except PermissionError:
            return _timed(
                start,
                False,
                f"ping {cfg.host}: this user may not send ICMP echo (net.ipv4.ping_group_range "
                f"is {_ping_range()!r}; it must include the daemon's group)",
            )
        except TimeoutError:
            return _timed(start, False, f"ping {cfg.host}: no reply within {cfg.timeout:g} s")
        except OSError as err:
            return _timed(start, False, f"ping {cfg.host}: {_describe(err)}")
        return _timed(start, True, f"ping {cfg.host}: reply")

    return attempt


def writable_attempt(cfg: ProbeConfig) -> Attempt:
    """Create, write, fsync and remove a small file: catches read-only remounts and full disks."""

    def attempt() -> Outcome:
        start = time.monotonic()
        probe_file = os.path.join(cfg.path, f".nodeprep-heartbeat-{os.getpid()}")
        try:
            fd = os.open(probe_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, b"heartbeat\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            os.unlink(probe_file)
        except OSError as err:
            return _timed(start, False, f"write {cfg.path}: {err.strerror or err}")
        return _timed(start, True, f"write {cfg.path}: ok")

    return attempt
