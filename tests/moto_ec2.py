"""A real EC2 HTTP endpoint for tests: moto in server mode on 127.0.0.1, never AWS."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ports import reserved_port

REGION = "eu-west-1"
# Dummy credentials: with them boto3 can only ever talk to the loopback endpoint it is given.
SANDBOX_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
}


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """Start moto_server from this venv on a port from tests/ports.py; yield its URL; stop it."""
    port = reserved_port()
    server = Path(sys.executable).parent / "moto_server"
    proc = subprocess.Popen(
        [str(server), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def make_volume(ec2: Any, size: int = 10, kind: str = "gp3") -> str:
    extra: dict[str, Any] = {"Iops": 3000, "Throughput": 125} if kind == "gp3" else {}
    volume = ec2.create_volume(AvailabilityZone=f"{REGION}a", Size=size, VolumeType=kind, **extra)
    return str(volume["VolumeId"])
