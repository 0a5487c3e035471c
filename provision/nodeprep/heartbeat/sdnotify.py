"""The systemd notify protocol: one datagram of ``KEY=value`` lines to ``$NOTIFY_SOCKET``.

Small enough to carry here instead of a dependency. An ``@`` prefix names an abstract
socket. Without ``NOTIFY_SOCKET`` (run by hand, in tests) every call is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)


class Notifier:
    """Sends READY/WATCHDOG/STATUS/STOPPING to systemd when it asked for them."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        self.address = "\0" + address[1:] if address.startswith("@") else address
        self.watchdog_s = _watchdog_seconds(env)

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def send(self, **fields: str) -> bool:
        """Send one message; returns whether it was delivered (never raises)."""
        if not self.address:
            return False
        payload = "\n".join(f"{k}={v}" for k, v in fields.items()).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(payload, self.address)
        except OSError as err:
            log.warning("sd_notify to %s failed: %s", self.address.lstrip("\0"), err)
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.send(READY="1", STATUS=status)

    def ping(self) -> bool:
        return self.send(WATCHDOG="1")

    def status(self, text: str) -> bool:
        return self.send(STATUS=text)

    def stopping(self) -> bool:
        return self.send(STOPPING="1")


def _watchdog_seconds(env: Mapping[str, str]) -> float | None:
    """``WATCHDOG_USEC`` in seconds, if the watchdog is meant for this process."""
    usec = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 1e6 if value > 0 else None
