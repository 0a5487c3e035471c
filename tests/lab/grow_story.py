"""The quick start node's growth story: the data disk fills at a steady rate and the
heartbeat's growth action grows it before it is full, in steps, up to its maximum; then it
stops and warns once.

On the node, for real: the heartbeat under systemd (provisioned with `--tags heartbeat` and
one growable volume, /data), the free_space probe, the request file, the path unit that
starts the root helper, boto3 reading the instance role's credentials from the metadata
service, ModifyVolume, the wait for the kernel, growpart and the online ext4 grow.

Stand-ins, each at a boundary that cannot exist here:
- EC2 is moto on the host's 127.0.0.1, reached from the node through an ssh reverse tunnel
  (the management NIC has restrict=on);
- the metadata service is nodeprep/lab/cloud_standin.py, served on the node at 169.254.169.254
  by `nodeprep lab metadata node1 up` (dummy instance-role credentials);
- the "hypervisor" thread grows the node's data disk through QMP once moto has accepted a
  modification, late on purpose, as EBS grows a disk under a running instance;
- the volume id is tied to the disk by a /dev/disk/by-id link, as udev makes it on EC2.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import boto3
from lab_helpers import METRICS, LabNode
from spot_notice import _nodeprep

from moto_ec2 import REGION, SANDBOX_ENV, make_volume, moto_server
from nodeprep import wheel
from nodeprep.lab.fileserve import reverse_tunnel

GUEST_PORT = 18731  # the node's end of the tunnel to moto
STATE = "/var/lib/nodeprep/volume-grow"
# boto3 and what it imports, as wheels for the node's offline install.
AWS_WHEELS = ("boto3", "botocore", "jmespath", "s3transfer", "python-dateutil", "six", "urllib3")
FILL = "sudo systemd-run --quiet --unit nodeprep-test-fill sh -c " + repr(
    "mkdir -p /data/fill && i=0; "
    "while fallocate -l 32M /data/fill/$i; do i=$((i+1)); sleep 1; done; "
    "echo fallocate failed at $i >&2; exit 1"
)


def aws_wheels() -> list[str]:
    cache = Path.home() / ".cache" / "nodeprep" / "wheels" / "deps"
    return [str(wheel.dependency_wheel(name, cache, "heartbeat_grow_aws_wheels"))
            for name in AWS_WHEELS]  # fmt: skip


def _answer(node: LabNode) -> dict[str, Any]:
    text = node.sh(f"cat {STATE}/volume-0.json 2>/dev/null || echo '{{}}'")
    return dict(json.loads(text))


def _variables(image_vars: dict[str, Any], volume_id: str, start_gib: int) -> dict[str, Any]:
    """One free_space probe on /data, read every second, and /data growable by 1 GiB steps
    to 2 GiB above its size now, asked for when it would be full within a minute."""
    return {
        **image_vars,
        "heartbeat_probes": [
            {"name": "data-free", "type": "free_space", "path": "/data", "interval": 1,
             "timeout": 1, "window_s": 10, "warn_percent": 10, "critical_percent": 3},
        ],
        "heartbeat_grow_volumes": [
            {"path": "/data", "volume_id": volume_id, "region": REGION,
             "endpoint_url": f"http://127.0.0.1:{GUEST_PORT}", "step_gb": 1,
             "max_gb": start_gib + 2, "when_s": 60, "cooldown_hours": 0},
        ],
        "heartbeat_grow_aws_wheels": aws_wheels(),
    }  # fmt: skip


class Hypervisor(threading.Thread):
    """Grows the node's data disk through QMP once EC2 (moto) has accepted a modification."""

    def __init__(self, node: LabNode, ec2: Any, volume_id: str, size: int) -> None:
        super().__init__(daemon=True)
        self.node, self.ec2, self.volume_id, self.seen = node, ec2, volume_id, size
        self.stop = threading.Event()
        self.grown_to: list[int] = []
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                volume = self.ec2.describe_volumes(VolumeIds=[self.volume_id])["Volumes"][0]
            except Exception as err:  # recorded; the story fails on it
                self.errors.append(f"describe_volumes: {err}")
                return
            if int(volume["Size"]) > self.seen:
                self.stop.wait(2)  # EBS is late: the helper waits for the kernel
                done = self.node.cli("fault", "node1", "disk-grow", f"{volume['Size']}G")
                if done.returncode:
                    self.errors.append(done.stderr)
                self.seen = int(volume["Size"])
                self.grown_to.append(self.seen)
            self.stop.wait(0.5)


def _fill_until_the_maximum(node: LabNode, limit_s: float) -> tuple[list[Any], str]:
    """Fill /data at 32 MiB/s until the helper answers "maximum"; (df timeline, whether the
    filler was still running then: "active" unless it met a full disk)."""
    node.sh(FILL)
    filling = time.monotonic()
    timeline: list[tuple[float, int, int]] = []  # (s, size MiB, avail MiB)
    while time.monotonic() < filling + limit_s:
        size, avail = node.sh("df --output=size,avail -B1M /data | tail -1").split()
        timeline.append((round(time.monotonic() - filling, 1), int(size), int(avail)))
        if _answer(node).get("kind") == "maximum":
            break
        time.sleep(2)
    still_filling = node.sh("systemctl is-active nodeprep-test-fill || true").strip()
    node.sh("sudo systemctl stop nodeprep-test-fill || true")
    time.sleep(3)  # the daemon takes the refusal in at its next reading
    return timeline, still_filling


def the_disk_grows_before_it_fills(
    node: LabNode, inventory: Path, image_vars: dict[str, Any], workdir: Path
) -> None:
    began = time.monotonic()
    saved_env = {key: os.environ.get(key) for key in SANDBOX_ENV}
    os.environ.update(SANDBOX_ENV)
    served = node.cli("metadata", "node1", "up")  # the instance role's credentials
    assert served.returncode == 0, served.stderr
    hypervisor: Hypervisor | None = None
    try:
        with moto_server() as url:
            ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=url)
            start_gib = -(-int(node.sh("sudo blockdev --getsize64 /dev/vdb")) // 2**30)
            volume_id = make_volume(ec2, size=start_gib)
            link = f"/dev/disk/by-id/virtio-{volume_id.replace('-', '')}"
            node.sh(f"sudo mkdir -p /dev/disk/by-id && sudo ln -sfn ../../vdb {link}")
            with reverse_tunnel(node.target, GUEST_PORT, int(url.rsplit(":", 1)[1])):
                variables = workdir / "grow-vars.json"
                variables.write_text(json.dumps(_variables(image_vars, volume_id, start_gib)))
                _nodeprep(node, workdir, "provision", str(inventory), "--fast", "--tags",
                          "heartbeat", "-e", f"@{variables}")  # fmt: skip
                provisioned = time.monotonic()
                assert node.sh("systemctl is-active nodeprep-volume-grow.path").strip() == "active"
                hypervisor = Hypervisor(node, ec2, volume_id, start_gib)
                hypervisor.start()
                try:
                    timeline, still_filling = _fill_until_the_maximum(node, 420)
                finally:  # while moto still answers
                    hypervisor.stop.set()
                    hypervisor.join(timeout=60)
    finally:
        node.sh("sudo systemctl stop nodeprep-test-fill 2>/dev/null; sudo rm -rf /data/fill; true")
        node.cli("metadata", "node1", "down")
        for key, value in saved_env.items():
            os.environ.pop(key, None) if value is None else os.environ.update({key: value})
    _judge(node, volume_id, start_gib, timeline, still_filling, hypervisor)
    print(f"growth story: provision {provisioned - began:.0f} s, "
          f"whole {time.monotonic() - began:.0f} s", flush=True)  # fmt: skip


def _judge(
    node: LabNode, volume_id: str, start_gib: int, timeline: list[Any], still_filling: str,
    hypervisor: Hypervisor | None,
) -> None:  # fmt: skip
    log = [json.loads(line) for line in node.sh(f"cat {STATE}/growth.log").splitlines()]
    journal = node.sh("sudo journalctl -u nodeprep-heartbeat --no-pager -o cat "
                      "| grep -E 'action=(grow|trip)' || true")  # fmt: skip
    metrics = node.sh(f"cat {METRICS}")
    print("growth log:", json.dumps(log, indent=1), flush=True)
    print(
        "request to answer (s):",
        [round(e["finished_at"] - e["requested_at"], 1) for e in log if e.get("requested_at")],
        flush=True,
    )
    print("timeline (s since the fill began, size MiB, avail MiB):", timeline, flush=True)
    print("heartbeat:\n" + journal, flush=True)
    assert hypervisor is not None
    assert not hypervisor.errors, hypervisor.errors
    assert still_filling == "active", "the filler met a full disk"
    grown = [entry for entry in log if entry["outcome"] == "grown"]
    steps = [(start_gib, start_gib + 1), (start_gib + 1, start_gib + 2)]
    assert [(g["from_gb"], g["size_gb"]) for g in grown] == steps, log
    assert hypervisor.grown_to == [start_gib + 1, start_gib + 2]
    assert (log[-1]["outcome"], log[-1]["kind"]) == ("refused", "maximum"), log[-1]
    assert timeline[-1][1] > (start_gib + 2) * 1024 - 200  # the filesystem itself grew
    assert min(avail for _, _, avail in timeline) > 100
    assert journal.count("action=grown") == 2, journal
    assert journal.count("action=grow_refused") == 1, journal  # said once
    assert journal.count("action=trip probe=data-free:grow") == 1, journal
    assert f'volume_growths_total{{path="/data",volume_id="{volume_id}"}} 2.0' in metrics
