"""The cloud step's EC2 endpoint: moto server on 127.0.0.1 (see tests/moto_ec2.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from moto_ec2 import REGION, SANDBOX_ENV, make_volume, moto_server

__all__ = ["REGION", "env_is_sandboxed", "make_volume"]


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in SANDBOX_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def ec2(moto_endpoint: str, aws_env: None) -> Any:
    return boto3.client("ec2", region_name=REGION, endpoint_url=moto_endpoint)


def env_is_sandboxed() -> bool:
    return os.environ.get("AWS_ACCESS_KEY_ID") == SANDBOX_ENV["AWS_ACCESS_KEY_ID"]
