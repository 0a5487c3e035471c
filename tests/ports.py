"""TCP ports for the servers tests start and name in advance (rendezvous endpoints, moto).

A port that bind(0) picked and the socket then closed is free only until another process
takes it: the kernel hands ports of the same range to every outgoing connection, and with two
test workers (pytest-xdist, `make test`) the other worker's connections and servers draw from
it too. The ports here come from below the kernel's ephemeral range, which it never hands out
on its own, in a block of their own for each worker, and each is handed out once per process.
"""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

BASE, BLOCK = 20000, 1000
_counter = itertools.count()


def _worker() -> int:
    """gw0, gw1, ... under pytest-xdist; 0 without it."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name[:2] == "gw" and name[2:].isdigit() else 0


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def reserved_port() -> int:
    """A port on 127.0.0.1, free now, that neither the kernel nor the other worker hands out."""
    start = BASE + _worker() * BLOCK
    if start + BLOCK > _ephemeral_low():
        # 12 workers or more, or a host whose ephemeral range starts below 22000.
        raise RuntimeError(f"ports {start}-{start + BLOCK - 1} reach the ephemeral range")
    for _ in range(BLOCK):
        port = start + next(_counter) % BLOCK
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {start}-{start + BLOCK - 1}")
