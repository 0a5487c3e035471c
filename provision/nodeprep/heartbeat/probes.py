"""Single probe attempts: each returns an :class:`Outcome` and never raises.

An attempt is a plain blocking call bounded by the probe's timeout; the scheduler runs
every attempt in its own worker and stops waiting at the deadline, so a call that ignores
its timeout (a hung NFS write, a stalled resolver) still cannot stall the loop.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from nodeprep.heartbeat.config import ProbeConfig

TOKEN_HEADER = "X-aws-ec2-metadata-token"
TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


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


def _request(
    url: str, timeout: float, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """One HTTP exchange; non-2xx statuses are returned, not raised."""
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with _NO_PROXY.open(req, timeout=timeout) as resp:
            return int(resp.status), resp.read(65536)
    except urllib.error.HTTPError as err:
        body = err.read(65536) if err.fp else b""
        return int(err.code), body


def _describe(err: BaseException) -> str:
    if isinstance(err, urllib.error.URLError) and isinstance(err.reason, BaseException):
        err = err.reason
    if isinstance(err, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    return f"{type(err).__name__}: {err}"


def http_attempt(cfg: ProbeConfig) -> Attempt:
    """GET a URL and expect one of the configured statuses."""

    def attempt() -> Outcome:
        start = time.monotonic()
        try:
            status, _ = _request(cfg.url, cfg.timeout)
        except (OSError, http.client.HTTPException) as err:
            return _timed(start, False, f"GET {cfg.url}: {_describe(err)}")
        ok = status in cfg.expect_status
        return _timed(start, ok, f"GET {cfg.url}: HTTP {status}")

    return attempt


class MetadataClient:
    """IMDSv2: PUT for a session token, then GET with it; the token is reused until near expiry."""

    def __init__(self, base_url: str, token_ttl: int) -> None:
        self.base_url = base_url
        self.token_ttl = token_ttl
        self._token: str | None = None
        self._token_expires = 0.0

    def _fetch_token(self, timeout: float) -> str:
        status, body = _request(
            f"{self.base_url}/latest/api/token",
            timeout,
            method="PUT",
            headers={TOKEN_TTL_HEADER: str(self.token_ttl)},
        )
        if status != 200 or not body:
            raise ConnectionError(f"token PUT answered HTTP {status}")
        self._token = body.decode("ascii", "replace").strip()
        self._token_expires = time.monotonic() + self.token_ttl * 0.9
        return self._token

    def get(self, path: str, timeout: float) -> tuple[int, bytes]:
        """GET ``path`` with a valid token; one token refresh on HTTP 401."""
        deadline = time.monotonic() + timeout
        token = self._token
        if token is None or time.monotonic() >= self._token_expires:
            token = self._fetch_token(timeout)
        left = max(0.01, deadline - time.monotonic())
        status, body = _request(f"{self.base_url}{path}", left, headers={TOKEN_HEADER: token})
        if status == 401:
            self._token = None
            token = self._fetch_token(max(0.01, deadline - time.monotonic()))
            left = max(0.01, deadline - time.monotonic())
            status, body = _request(f"{self.base_url}{path}", left, headers={TOKEN_HEADER: token})
        return status, body


def imds_attempt(cfg: ProbeConfig) -> Attempt:
    """The metadata service answers a tokened GET with 200."""
    client = MetadataClient(cfg.url, cfg.token_ttl)

    def attempt() -> Outcome:
        start = time.monotonic()
        try:
            status, _ = client.get(cfg.path, cfg.timeout)
        except (OSError, http.client.HTTPException) as err:
            return _timed(start, False, f"metadata {cfg.path}: {_describe(err)}")
        return _timed(start, status == 200, f"metadata {cfg.path}: HTTP {status}")

    return attempt


SPOT_PATH = "/latest/meta-data/spot/instance-action"
EVENTS_PATH = "/latest/meta-data/events/maintenance/scheduled"
_DONE_EVENT_STATES = {"completed", "canceled", "cancelled"}


def _pending_events(body: bytes) -> list[str]:
    try:
        events = json.loads(body or b"[]")
    except ValueError:
        return ["unparseable scheduled-events answer"]
    if not isinstance(events, list):
        return [str(events)]
    return [
        f"{e.get('Code', '?')} at {e.get('NotBefore', '?')}"
        for e in events
        if isinstance(e, dict) and str(e.get("State", "")).lower() not in _DONE_EVENT_STATES
    ]


def _spot_check(client: MetadataClient, timeout: float) -> tuple[str, bool, bool]:
    """(evidence, ok, notice) from the instance-action and scheduled-events documents."""
    start = time.monotonic()
    status, body = client.get(SPOT_PATH, timeout)
    if status == 200:
        text = body.decode("utf-8", "replace").strip()
        return f"spot instance-action notice: {text}", False, True
    if status != 404:
        return f"metadata {SPOT_PATH}: HTTP {status}", False, False
    status, body = client.get(EVENTS_PATH, max(0.01, timeout - (time.monotonic() - start)))
    if status not in (200, 404):
        return f"metadata {EVENTS_PATH}: HTTP {status}", False, False
    pending = _pending_events(body) if status == 200 else []
    if pending:
        return f"scheduled event notice: {'; '.join(pending)}", False, True
    return "no spot or maintenance notice", True, False


def spot_attempt(cfg: ProbeConfig) -> Attempt:
    """A spot interruption or scheduled maintenance notice is an immediate trigger."""
    client = MetadataClient(cfg.url, cfg.token_ttl)

    def attempt() -> Outcome:
        start = time.monotonic()
        try:
            evidence, ok, notice = _spot_check(client, cfg.timeout)
        except (OSError, http.client.HTTPException) as err:
            return _timed(start, False, f"metadata spot/events: {_describe(err)}")
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
