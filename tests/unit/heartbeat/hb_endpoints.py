"""A real HTTP server on 127.0.0.1 whose behaviour a test switches while probes poll it.

It speaks the parts of the EC2 metadata protocol the watchdog uses (IMDSv2 token PUT,
tokened GETs, spot instance-action, scheduled events) and answers any other path as a
plain health endpoint. Modes: ok, slow (answers after ``slow_s``), hang (accepts and
never answers), error (HTTP 503), refuse (nothing listens on the port), spot (an
interruption notice), events (a scheduled maintenance event).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ports import reserved_port

MODES = ("ok", "slow", "hang", "error", "refuse", "spot", "events")


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        return

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _behave(self) -> bool:
        """Apply hang/slow/error; returns False when the request got its answer already."""
        ep = self.server.endpoint
        mode = ep.mode
        if mode == "hang":
            ep.released.wait(30)
            self.close_connection = True
            return False
        if mode == "slow":
            time.sleep(ep.slow_s)
        if mode == "error":
            self._reply(503, b"unavailable")
            return False
        return True

    def do_PUT(self) -> None:
        ep = self.server.endpoint
        if not self._behave():
            return
        if self.path != "/latest/api/token" or not self.headers.get(
            "X-aws-ec2-metadata-token-ttl-seconds"
        ):
            self._reply(400, b"bad token request")
            return
        self._reply(200, ep.new_token().encode())

    def do_GET(self) -> None:
        ep = self.server.endpoint
        ep.gets += 1
        if not self._behave():
            return
        meta = self.path.startswith("/latest/")
        if meta and self.headers.get("X-aws-ec2-metadata-token") not in ep.tokens:
            self._reply(401, b"")
            return
        if self.path == "/latest/meta-data/spot/instance-action":
            if ep.mode == "spot":
                notice = {"action": "terminate", "time": "2026-11-30T20:00:00Z"}
                self._reply(200, json.dumps(notice).encode())
            else:
                self._reply(404, b"")
            return
        if self.path == "/latest/meta-data/events/maintenance/scheduled":
            events = [{"Code": "system-reboot", "NotBefore": "soon", "State": "active"}]
            self._reply(200, json.dumps(events if ep.mode == "events" else []).encode())
            return
        self._reply(200, b"ok")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        super().__init__(("127.0.0.1", port), _Handler)

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that gave up at its timeout is the expected case here, not an error."""
        return


class Endpoint:
    """Start with ``start()``, switch with ``set_mode()``, stop with ``stop()``."""

    def __init__(self, slow_s: float = 0.3) -> None:
        self.slow_s = slow_s
        self.mode = "ok"
        self.port = reserved_port()  # kept across 'refuse': no other worker takes it meanwhile
        self.tokens: set[str] = set()
        self.token_puts = 0
        self.gets = 0
        self.released = threading.Event()
        self._server: _Server | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def new_token(self) -> str:
        with self._lock:
            self.token_puts += 1
            token = f"token-{self.token_puts}"
            self.tokens.add(token)
        return token

    def start(self) -> Endpoint:
        self._serve()
        return self

    def _serve(self) -> None:
        server = _Server(self.port, self)
        self.port = server.server_address[1]
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self._server = server

    def _close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def set_mode(self, mode: str) -> None:
        """Switch behaviour; 'refuse' closes the listening socket, leaving it reopens it."""
        assert mode in MODES, mode
        if mode != "hang":
            self.released.set()
        if mode == "refuse" and self.mode != "refuse":
            self._close()
        if mode != "refuse" and self._server is None:
            self._serve()
        if mode == "hang":
            self.released.clear()
        self.mode = mode

    def stop(self) -> None:
        self.released.set()
        self._close()


def http_probe(
    endpoint: Endpoint, interval: float, timeout: float, fail_threshold: int
) -> dict[str, Any]:
    """A probe config of the ``web`` http probe against ``endpoint`` (the tests' usual probe)."""
    return {
        "name": "web",
        "type": "http",
        "url": f"{endpoint.url}/",
        "interval": interval,
        "timeout": timeout,
        "fail_threshold": fail_threshold,
    }
