"""A dynamic inventory: an amazon.aws.aws_ec2 plugin file, read by nodeprep against moto's
real EC2 HTTP endpoint on 127.0.0.1 (dummy credentials; never AWS), with instances the
test starts there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from moto_ec2 import REGION, SANDBOX_ENV, moto_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
ENV = {**SANDBOX_ENV, "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """moto with two training instances and one that serves, each tagged with its Name."""
    with moto_server() as url:
        ec2 = boto3.client("ec2", endpoint_url=url, region_name=REGION, aws_access_key_id="testing",
                           aws_secret_access_key="testing")  # fmt: skip
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        for name, role in (("gpu-a", "train"), ("gpu-b", "train"), ("web-1", "serve")):
            tags = [{"Key": "Name", "Value": name}, {"Key": "role", "Value": role}]
            ec2.run_instances(
                ImageId=image, MinCount=1, MaxCount=1, InstanceType="p4d.24xlarge",
                TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
            )  # fmt: skip
        yield url


def plugin_file(tmp_path: Path, url: str, **settings: Any) -> Path:
    config = {
        "plugin": "amazon.aws.aws_ec2",
        "regions": [REGION],
        "endpoint_url": url,
        "hostnames": ["tag:Name"],
        "compose": {"ansible_host": "private_ip_address"},
        **settings,
    }
    path = tmp_path / "fleet.aws_ec2.yml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def nodeprep(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("nodeprep")), *args],
        env={**os.environ, **ENV}, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_list_hosts_shows_the_instances_the_filter_selects(endpoint: str, tmp_path: Path) -> None:
    inventory = plugin_file(tmp_path, endpoint, filters={"tag:role": "train"})
    done = nodeprep("provision", str(inventory), "--list-hosts")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["gpu-a", "gpu-b"]
    assert "DEPRECATION" not in done.stderr
    limited = nodeprep("provision", str(inventory), "--list-hosts", "-l", "gpu-b")
    assert limited.stdout.split() == ["gpu-b"], limited.stdout + limited.stderr


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"filters": {"no-such-filter": "x"}}, "the amazon.aws.aws_ec2 inventory plugin failed"),
        ({"filters": {"tag:role": "nobody"}}, "the amazon.aws.aws_ec2 inventory plugin found no "
                                              "hosts; check its filters"),
        ({"plugin": "amazon.aws.aws_ec3"}, "unknown plugin 'amazon.aws.aws_ec3'"),
    ],
)  # fmt: skip
def test_a_bad_filter_or_plugin_is_refused_in_one_sentence(
    endpoint: str, tmp_path: Path, settings: dict[str, Any], said: str
) -> None:
    done = nodeprep("provision", str(plugin_file(tmp_path, endpoint, **settings)), "--list-hosts")
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
