"""A small QMP client: qemu's JSON control socket, used for faults and saved states.

QMP sends one JSON object per line: a greeting, then replies ("return"/"error") in order,
with asynchronous events ("event") interleaved. Events are kept aside, not mistaken for replies.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from nodeprep.lab.errors import LabError

Message = dict[str, Any]


def split_messages(buffer: bytes) -> tuple[list[Message], bytes]:
    """Complete JSON lines from buffer, and the unfinished rest to keep for the next read."""
    *lines, rest = buffer.split(b"\n")
    messages: list[Message] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            decoded = json.loads(line)
        except json.JSONDecodeError as error:
            raise LabError(f"QMP sent a line that is not JSON: {line[:200]!r}") from error
        if not isinstance(decoded, dict):
            raise LabError(f"QMP sent a JSON value that is not an object: {line[:200]!r}")
        messages.append(decoded)
    return messages, rest


def encode_command(command: str, arguments: Message | None = None) -> bytes:
    """One QMP command as a line of JSON."""
    payload: Message = {"execute": command}
    if arguments:
        payload["arguments"] = arguments
    return json.dumps(payload).encode() + b"\n"


class QmpClient:
    """A connected, capabilities-negotiated QMP session on a unix socket."""

    def __init__(self, path: Path, timeout_s: float = 30.0) -> None:
        self.path = path
        self.events: list[Message] = []
        self._buffer = b""
        self._pending: list[Message] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        try:
            self._sock.connect(str(path))
            greeting = self._next_message()
            if "QMP" not in greeting:
                raise LabError(f"{path} did not greet as QMP: {greeting}")
            self.execute("qmp_capabilities")
        except (OSError, LabError):
            self._sock.close()
            raise

    def __enter__(self) -> QmpClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def _next_message(self) -> Message:
        while not self._pending:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise LabError(f"QMP socket {self.path} closed by qemu")
            messages, self._buffer = split_messages(self._buffer + chunk)
            self._pending.extend(messages)
        return self._pending.pop(0)

    def execute(self, command: str, arguments: Message | None = None) -> Any:
        """Run a command and return its "return" value; a QMP error raises LabError."""
        self._sock.sendall(encode_command(command, arguments))
        while True:
            reply = self._next_message()
            if "event" in reply:
                self.events.append(reply)
                continue
            if "error" in reply:
                desc = reply["error"].get("desc", reply["error"])
                raise LabError(f"QMP {command} failed: {desc}")
            return reply.get("return")

    def wait_migration(self, timeout_s: float) -> None:
        """Poll query-migrate until it completes; a failed or stalled migration raises."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = (self.execute("query-migrate") or {}).get("status")
            if status == "completed":
                return
            if status in ("failed", "cancelled"):
                raise LabError(f"migration {status} on {self.path}")
            time.sleep(0.1)
        raise LabError(f"migration on {self.path} did not complete within {timeout_s:.0f} s")


def connect(path: Path, wait_s: float = 10.0) -> QmpClient:
    """Connect to a QMP socket, waiting for qemu to create it."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return QmpClient(path)
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() >= deadline:
                raise LabError(f"QMP socket {path} did not appear within {wait_s:.0f} s") from None
            time.sleep(0.05)
