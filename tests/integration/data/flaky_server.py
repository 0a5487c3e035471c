"""A deliberately unreliable HTTP/1.1 file server on 127.0.0.1, for download tests and benchmarks.

Not a fake: a real ``ThreadingHTTPServer`` whose faults are real socket
events (a FIN or an RST in the middle of a body, a closed listening socket,
a silent connection), so the client under test meets exactly what a real
network does to it. It serves one file at ``/data.bin`` with Range, ETag and
Last-Modified, and logs every request it answers.

Self-contained (standard library only, no package-relative imports) so that
``benchmarks/data_download.py`` can load it by path.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

FILE_PATH = "/data.bin"
_SEND_CHUNK = 64 << 10
_RANGE_PREFIX = "bytes="


@dataclass
class Drop:
    """A fault at ``offset`` (absolute, in the file) of the first answer that passes it.

    The connection is cut there: with a FIN (a short read) or, with ``reset``,
    an RST. ``stall`` seconds of silence come first when set; ``outage`` seconds
    without a listener follow when set; ``new_content``/``new_etag`` replace
    the file at that instant when set (the file changed mid-download).
    """

    offset: int
    reset: bool = False
    stall: float = 0.0
    outage: float = 0.0
    new_content: bytes | None = None
    new_etag: str | None = None


@dataclass
class Request:
    """One answered request as the server saw it."""

    path: str
    range: str | None
    if_range: str | None
    status: int
    sent: int = 0
    at: float = field(default_factory=time.monotonic)

    @property
    def range_start(self) -> int | None:
        if self.range is None or not self.range.startswith(_RANGE_PREFIX):
            return None
        return int(self.range.removeprefix(_RANGE_PREFIX).split("-", 1)[0])


@dataclass
class Faults:
    """What the server does wrong; the test sets these before or during a download."""

    drops: list[Drop] = field(default_factory=list)
    ignore_range: bool = False
    honour_if_range: bool = True
    corrupt: bool = False
    statuses: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    redirects: dict[str, str] = field(default_factory=dict)
    pace_bytes_s: float = 0.0  # a slow link: each 64 KiB chunk waits its share (0: no wait)


class _Server(ThreadingHTTPServer):
    # Handler threads are joined on close, so a test leaves no thread behind.
    daemon_threads = False
    block_on_close = True

    def __init__(self, port: int, owner: FlakyServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10
    server: _Server

    def do_GET(self) -> None:
        self.server.owner.answer(self)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the request log is the record that tests read."""


class FlakyServer:
    """Serves ``content`` at ``url`` with the faults in ``faults``; use as a context manager."""

    def __init__(self, content: bytes, etag: str = '"v1"') -> None:
        self.content, self.etag = content, etag
        self.last_modified = "Mon, 01 Jan 2024 00:00:00 GMT"
        self.faults = Faults()
        self.requests: list[Request] = []
        self.outages: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._outage_thread: threading.Thread | None = None
        self.port = 0

    def __enter__(self) -> FlakyServer:
        self._listen(0)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def url(self, path: str = FILE_PATH) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def bytes_sent(self) -> int:
        with self._lock:
            return sum(request.sent for request in self.requests)

    def snapshot(self) -> list[Request]:
        """Copies of the requests answered so far, taken under the server's lock."""
        with self._lock:
            return [replace(request) for request in self.requests]

    def range_starts(self) -> list[int | None]:
        with self._lock:
            return [request.range_start for request in self.requests]

    def stop(self) -> None:
        """Stop serving and join every thread this server started, outage included."""
        self._stopping.set()
        if self._outage_thread is not None:
            self._outage_thread.join(timeout=30)
        with self._lock:
            server, thread, self._server = self._server, self._thread, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=30)

    def _listen(self, port: int) -> None:
        server = _Server(port, self)
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="flaky-http")
        with self._lock:
            self._server, self._thread, self.port = server, thread, server.server_address[1]
        thread.start()

    def _go_away(self, seconds: float) -> None:
        """Close the listening socket (connections are refused), then listen again, same port."""
        with self._lock:
            server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        went = time.monotonic()
        server.shutdown()
        server.server_close()
        thread.join()
        if not self._stopping.wait(seconds):
            self._listen(self.port)
        self.outages.append((went, time.monotonic()))

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        """Answer one GET, applying the next scripted status, redirect or drop."""
        faults = self.faults
        record = Request(handler.path, handler.headers["Range"], handler.headers["If-Range"], 0)
        with self._lock:
            self.requests.append(record)
            scripted = faults.statuses.pop(0) if faults.statuses else None
            content, etag = self.content, self.etag
        if scripted is not None:
            self._send_empty(handler, record, scripted[0], scripted[1])
        elif handler.path in faults.redirects:
            self._send_empty(handler, record, 302, {"Location": faults.redirects[handler.path]})
        elif handler.path != FILE_PATH:
            self._send_empty(handler, record, 404, {})
        else:
            if faults.corrupt:
                middle = len(content) // 2
                content = content[:middle] + bytes([content[middle] ^ 0xFF]) + content[middle + 1 :]
            self._send_file(handler, record, content, etag)

    def _send_empty(
        self, handler: BaseHTTPRequestHandler, record: Request, status: int, headers: dict[str, str]
    ) -> None:
        record.status = status
        handler.send_response(status)
        for name, value in {**headers, "Content-Length": "0", "Connection": "close"}.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.close_connection = True

    def _start_offset(self, handler: BaseHTTPRequestHandler, etag: str) -> int | None:
        """Where a 206 starts, or None to answer 200 with the whole file."""
        wanted = handler.headers["Range"]
        if self.faults.ignore_range or wanted is None or not wanted.startswith(_RANGE_PREFIX):
            return None
        if_range = handler.headers["If-Range"]
        if if_range is not None and self.faults.honour_if_range and if_range != etag:
            return None
        first, _, last = wanted.removeprefix(_RANGE_PREFIX).partition("-")
        return int(first) if first.isdigit() and not last else None

    def _send_file(
        self, handler: BaseHTTPRequestHandler, record: Request, content: bytes, etag: str
    ) -> None:
        start = self._start_offset(handler, etag)
        total = len(content)
        if start is not None and start >= total:
            self._send_empty(handler, record, 416, {"Content-Range": f"bytes */{total}"})
            return
        record.status = 200 if start is None else 206
        handler.send_response(record.status)
        headers = {"Content-Length": str(total - (start or 0)), "ETag": etag}
        headers |= {"Last-Modified": self.last_modified, "Accept-Ranges": "bytes"}
        if start is not None:
            headers["Content-Range"] = f"bytes {start}-{total - 1}/{total}"
        for name, value in {**headers, "Connection": "close"}.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.close_connection = True
        self._send_body(handler, record, content, start or 0)

    def _send_body(
        self, handler: BaseHTTPRequestHandler, record: Request, content: bytes, start: int
    ) -> None:
        with self._lock:
            pending = [d for d in self.faults.drops if start < d.offset <= len(content)]
            drop = pending[0] if pending else None
            if drop is not None:
                self.faults.drops.remove(drop)
        end = drop.offset if drop is not None else len(content)
        position = start
        try:
            while position < end:
                chunk = content[position : min(position + _SEND_CHUNK, end)]
                handler.wfile.write(chunk)
                position += len(chunk)
                with self._lock:
                    record.sent += len(chunk)
                if self.faults.pace_bytes_s > 0 and self._stopping.wait(
                    len(chunk) / self.faults.pace_bytes_s
                ):
                    return  # stopping: the test is over
        except OSError:
            return  # the client went away first; nothing to inject
        if drop is not None:
            self._inject(handler, drop)

    def _inject(self, handler: BaseHTTPRequestHandler, drop: Drop) -> None:
        if drop.stall:
            self._stopping.wait(drop.stall)
        if drop.new_content is not None:
            with self._lock:
                self.content, self.etag = drop.new_content, drop.new_etag or '"changed"'
                self.last_modified = "Tue, 02 Jan 2024 00:00:00 GMT"
        _cut(handler, drop.reset)
        if drop.outage:
            self._outage_thread = threading.Thread(
                target=self._go_away, args=(drop.outage,), name="flaky-http-outage"
            )
            self._outage_thread.start()


def _cut(handler: BaseHTTPRequestHandler, reset: bool) -> None:
    """End the connection mid-body: FIN (an orderly close), or RST when ``reset``."""
    connection: socket.socket = handler.connection
    try:
        if reset:
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            # The socket closes for real (and sends the RST) only once no file object holds
            # it; the writer holds none, and the handler still flushes it afterwards.
            handler.rfile.close()
            connection.close()
        else:
            connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    handler.close_connection = True
