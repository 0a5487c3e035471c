"""roles/volume_grow's guest step on a real kernel: the lab's data disk grown through QMP.

`nodeprep lab fault node1 disk-grow` is what the hypervisor does when an EBS volume grows;
the role must then find the disk, wait for the size, grow the partition and the filesystem
online, and never lose a byte of what was on it. ext4 grown online, with data on it, and a
second run that changes nothing: the quick start's node (tests/lab/test_quickstart.py) and
the fleet's (tests/lab/test_fleet.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from lab_helpers import LabNode

from moto_ec2 import REGION, SANDBOX_ENV, make_volume, moto_server
from nodeprep import runner

pytestmark = pytest.mark.timeout(1500)

GIB = 1024**3
# 64 MiB of random data on the filesystem: its checksum must survive every grow.
WRITE_PAYLOAD = "sudo dd if=/dev/urandom of=/data/payload bs=1M count=64 status=none && sync"
PAYLOAD_SUM = "sha256sum /data/payload | cut -d' ' -f1"


def converge(
    node: LabNode, tmp_path: Path, volumes: list[dict[str, Any]], fast: bool = False, **extra: Any
) -> Any:
    """Run the role on the lab node through nodeprep's runner, as `provision` does (with
    ``fast``, as `provision --fast` does: the mitogen strategy)."""
    written = node.cli("inventory", "--output", str(tmp_path / "lab.ini"))
    assert written.returncode == 0, written.stderr
    play = tmp_path / "grow.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  roles: [volume_grow]\n")
    request = runner.RunRequest(
        playbook=play,
        inventory=Path(written.stdout.strip()),
        extra_vars={"volume_grow_volumes": volumes, "volume_grow_cloud_enabled": False, **extra},
        fast=fast,
    )
    return runner.run(request)


def grow_disk(node: LabNode, size: str) -> None:
    done = node.cli("fault", "node1", "disk-grow", size)
    assert done.returncode == 0, done.stderr


def data_size_mib(node: LabNode) -> int:
    return int(node.sh("df --output=size -B1M /data | tail -1"))


def messages(result: Any) -> str:
    return " ".join(f.message for f in result.failures)


def test_unknown_filesystem_is_refused_then_xfs_grows_through_its_mount_point(
    lab_node: LabNode, tmp_path: Path
) -> None:
    # Random bytes where the filesystem was: nothing any tool recognises.
    lab_node.sh(
        "sudo umount /data && sudo wipefs -q -a /dev/vdb1 && "
        "sudo dd if=/dev/urandom of=/dev/vdb1 bs=1M count=8 status=none && sync"
    )
    grow_disk(lab_node, "2G")
    snapshot = "sudo sfdisk --dump /dev/vdb; sudo head -c 16M /dev/vdb1 | sha256sum"
    before = lab_node.sh(snapshot)

    result = converge(lab_node, tmp_path, [{"device": "/dev/vdb"}], fast=True)
    assert result.exit_code == 1
    assert "/dev/vdb1 has filesystem none/unknown, which nodeprep does not grow" in messages(result)
    assert result.recap["node1"].changed == 0
    assert lab_node.sh(snapshot) == before

    lab_node.sh("sudo mkfs.xfs -q -f /dev/vdb1 && sudo mount /dev/vdb1 /data")
    lab_node.sh(WRITE_PAYLOAD)
    before = lab_node.sh(PAYLOAD_SUM)
    grow_disk(lab_node, "3G")

    result = converge(lab_node, tmp_path, [{"mount": "/data"}], fast=True)
    assert result.exit_code == 0, result.failures
    assert result.recap["node1"].changed == 3  # growpart, xfs_growfs, the marker
    assert data_size_mib(lab_node) > 2900
    assert lab_node.sh("findmnt -no FSTYPE /data").strip() == "xfs"
    assert lab_node.sh(PAYLOAD_SUM) == before

    # Below the disk's size now, or no size at all: refused before anything changes.
    table = lab_node.sh("sudo sfdisk --dump /dev/vdb")
    smaller = converge(lab_node, tmp_path, [{"device": "/dev/vdb", "size_gb": 1}], fast=True)
    assert smaller.exit_code == 1
    assert "size_gb 1 for /dev/vdb is below its current 3.0 GiB" in messages(smaller)
    assert smaller.recap["node1"].changed == 0
    negative = converge(lab_node, tmp_path, [{"device": "/dev/vdb", "size_gb": -5}], fast=True)
    assert negative.exit_code == 1
    assert "a size_gb of 1 GiB or more" in messages(negative)
    assert negative.recap["node1"].changed == 0
    assert lab_node.sh("sudo sfdisk --dump /dev/vdb") == table
    assert lab_node.sh(PAYLOAD_SUM) == before


@pytest.fixture
def sandbox_ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    for key, value in SANDBOX_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with moto_server() as url:
        yield boto3.client("ec2", region_name=REGION, endpoint_url=url), url


@pytest.mark.lab_long
def test_end_to_end_api_then_hypervisor_then_guest(
    lab_node: LabNode, tmp_path: Path, sandbox_ec2: tuple[Any, str]
) -> None:
    """The role's cloud step, then a late hypervisor grow, then its guest step on the node.

    In `make test-lab-long` only (about 70 s of the CI budget): `make test` covers each part on
    its own path (the cloud step against moto in tests/integration/volume_grow, the guest step
    on the quick start's and the fleet's nodes) and the same chain end to end through the
    heartbeat's growth action on the quick start's node (tests/lab/grow_story.py: ModifyVolume
    in moto, the late QMP grow, the wait for the kernel, growpart, the online ext4 grow)."""
    ec2, endpoint = sandbox_ec2
    volume_id = make_volume(ec2, size=1)
    # What udev does on EC2 (the disk's serial is the volume id); moto's ids are random, so
    # the link is made here instead of baked into the lab's disk serial.
    serial = volume_id.replace("-", "")
    link = f"/dev/disk/by-id/virtio-{serial}"
    lab_node.sh(f"sudo mkdir -p /dev/disk/by-id && sudo ln -sfn ../../vdb {link}")
    lab_node.sh(WRITE_PAYLOAD)
    before = lab_node.sh(PAYLOAD_SUM)

    stop = threading.Event()
    hypervisor_errors: list[str] = []

    def hypervisor() -> None:
        """Grow the lab disk once EC2 has accepted the modification, as AWS would."""
        while not stop.is_set():
            mods = ec2.describe_volumes_modifications(VolumeIds=[volume_id])
            if mods["VolumesModifications"]:
                # Late on purpose, as EBS often is: the guest step has to wait for the size.
                stop.wait(20)
                done = lab_node.cli("fault", "node1", "disk-grow", "2G")
                if done.returncode != 0:
                    hypervisor_errors.append(done.stderr)
                return
            time.sleep(0.5)

    thread = threading.Thread(target=hypervisor, daemon=True)
    thread.start()
    try:
        result = converge(
            lab_node,
            tmp_path,
            [{"id": volume_id, "size_gb": 2}],
            volume_grow_cloud_enabled=True,
            volume_grow_aws_region=REGION,
            volume_grow_aws_endpoint_url=endpoint,
        )
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not hypervisor_errors, hypervisor_errors
    assert result.exit_code == 0, result.failures
    assert ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["Size"] == 2
    assert int(lab_node.sh("cat /sys/block/vdb/size")) * 512 == 2 * GIB
    assert data_size_mib(lab_node) > 1900
    assert lab_node.sh(PAYLOAD_SUM) == before
