"""The cloud step of roles/volume_grow against moto's EC2 API on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeprep import runner

from .conftest import REGION, env_is_sandboxed, make_volume

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def grow(
    tmp_path: Path, inventory: Path, endpoint: str, volumes: list[dict[str, Any]], **extra: Any
) -> runner.RunResult:
    assert env_is_sandboxed()
    play = tmp_path / "play.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  roles: [volume_grow]\n")
    request = runner.RunRequest(
        playbook=play,
        inventory=inventory,
        extra_vars={
            "volume_grow_volumes": volumes,
            "volume_grow_guest_enabled": False,
            "volume_grow_aws_region": REGION,
            "volume_grow_aws_endpoint_url": endpoint,
            **extra,
        },
    )
    return runner.run(request)


def size_of(ec2: Any, volume_id: str) -> dict[str, Any]:
    volume = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
    return {k: volume.get(k) for k in ("Size", "VolumeType", "Iops", "Throughput")}


def messages(result: runner.RunResult) -> str:
    return " ".join(f.message for f in result.failures)


def test_grow_preserves_type_and_is_idempotent(
    ec2: Any, moto_endpoint: str, local_inventory: Path, tmp_path: Path
) -> None:
    volume_id = make_volume(ec2, size=10)
    first = grow(tmp_path, local_inventory, moto_endpoint, [{"id": volume_id, "size_gb": 20}])
    assert first.exit_code == 0, first.failures
    assert first.recap["localhost"].changed == 1
    assert size_of(ec2, volume_id) == {
        "Size": 20,
        "VolumeType": "gp3",
        "Iops": 3000,
        "Throughput": 125,
    }
    modifications = ec2.describe_volumes_modifications(VolumeIds=[volume_id])
    assert modifications["VolumesModifications"][-1]["TargetSize"] == 20

    second = grow(tmp_path, local_inventory, moto_endpoint, [{"id": volume_id, "size_gb": 20}])
    assert second.exit_code == 0, second.failures
    assert second.recap["localhost"].changed == 0
    assert (
        len(ec2.describe_volumes_modifications(VolumeIds=[volume_id])["VolumesModifications"]) == 1
    )


def test_shrink_is_refused(
    ec2: Any, moto_endpoint: str, local_inventory: Path, tmp_path: Path
) -> None:
    volume_id = make_volume(ec2, size=50, kind="gp2")
    result = grow(tmp_path, local_inventory, moto_endpoint, [{"id": volume_id, "size_gb": 40}])
    assert result.exit_code == 1
    assert f"Refusing to shrink EBS volume {volume_id} from 50 GiB to 40 GiB" in messages(result)
    assert size_of(ec2, volume_id)["Size"] == 50


def test_retry_within_cooldown_is_refused_with_retry_time(
    ec2: Any, moto_endpoint: str, local_inventory: Path, tmp_path: Path
) -> None:
    volume_id = make_volume(ec2, size=10)
    assert (
        grow(tmp_path, local_inventory, moto_endpoint, [{"id": volume_id, "size_gb": 15}]).exit_code
        == 0
    )
    again = grow(tmp_path, local_inventory, moto_endpoint, [{"id": volume_id, "size_gb": 30}])
    assert again.exit_code == 1
    text = messages(again)
    assert f"EBS volume {volume_id} was modified at" in text
    assert "one modification per volume every 6 hours, so retry after" in text
    assert size_of(ec2, volume_id)["Size"] == 15


@pytest.mark.parametrize(
    ("bad_id", "expected"),
    [
        ("vol-nothere", "'vol-nothere' is not an EBS volume id"),
        ("vol-0123456789abcdef0", "EBS volume vol-0123456789abcdef0 does not exist in region"),
    ],
)
def test_bad_volume_id_changes_nothing(
    ec2: Any, moto_endpoint: str, local_inventory: Path, tmp_path: Path, bad_id: str, expected: str
) -> None:
    good_id = make_volume(ec2, size=10)
    result = grow(
        tmp_path,
        local_inventory,
        moto_endpoint,
        [{"id": good_id, "size_gb": 12}, {"id": bad_id, "size_gb": 12}],
    )
    assert result.exit_code == 1
    assert expected in messages(result)
    assert size_of(ec2, good_id)["Size"] == 10
    assert ec2.describe_volumes_modifications(VolumeIds=[good_id])["VolumesModifications"] == []
