"""A real EC2 HTTP endpoint for the cloud step: moto in server mode on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

REGION = "eu-west-1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    port = _free_port()
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


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials: the endpoint is moto on loopback, never AWS."""
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def ec2(moto_endpoint: str, aws_env: None) -> Any:
    return boto3.client("ec2", region_name=REGION, endpoint_url=moto_endpoint)


def make_volume(ec2: Any, size: int = 10, kind: str = "gp3") -> str:
    extra: dict[str, Any] = {"Iops": 3000, "Throughput": 125} if kind == "gp3" else {}
    volume = ec2.create_volume(AvailabilityZone=f"{REGION}a", Size=size, VolumeType=kind, **extra)
    return str(volume["VolumeId"])


def env_is_sandboxed() -> bool:
    return os.environ.get("AWS_ACCESS_KEY_ID") == "testing"
