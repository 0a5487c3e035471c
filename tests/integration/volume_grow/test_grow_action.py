"""The heartbeat's growth action where growth must not happen: a real ext4 filesystem on a
loop device fills at a steady rate, the daemon asks, and the root helper (against moto's EC2
on 127.0.0.1) refuses: the volume is at its maximum, EC2's cooldown has not passed (with the
time it will), or the watched path is not on the volume's disk. Each refusal is said once and
warns the trainers once, however often the disk keeps filling.

The growth itself (ModifyVolume, the disk growing under the node, growpart and the online
filesystem grow, in steps up to the maximum) is the quick start's lab story
(tests/lab/grow_story.py): an online ext4 grow needs CAP_SYS_RESOURCE, which root on the test
machines lacks, and a lab VM has.

A stand-in, here in the test and nowhere in the product: the "path unit" thread starts
``python -m nodeprep.heartbeat.grow_helper`` as root when a request file appears, as
``nodeprep-volume-grow.path`` does on a node (which the lab story runs under real systemd).

Needs root (loop devices, mount); CI runs as root.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gce_standin import GceStandIn
from moto_ec2 import SANDBOX_ENV
from nodeprep.heartbeat import config as config_mod
from nodeprep.heartbeat import metrics
from nodeprep.heartbeat.daemon import Daemon
from nodeprep.lab.cloud_standin import GCP_PROJECT, GCP_TOKEN, GCP_ZONE, CloudStandIn

from .conftest import REGION, make_volume

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
GIB = 1024**3
REPO = Path(__file__).resolve().parents[3]


@contextlib.contextmanager
def loop_ext4(tmp_path: Path, size_gib: int) -> Iterator[tuple[str, Path, Path]]:
    """A sparse backing file, its loop device, ext4 on it mounted; all undone afterwards."""
    if os.geteuid() != 0:
        pytest.skip("loop devices and mounts need root (CI runs as root)")
    image, mount = tmp_path / "disk.img", tmp_path / "mnt"
    mount.mkdir()
    with open(image, "wb") as handle:
        handle.truncate(size_gib * GIB)
    device = subprocess.run(["losetup", "--find", "--show", str(image)], check=True,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", device], check=True)
        subprocess.run(["mount", device, str(mount)], check=True)
        try:
            yield device, image, mount
        finally:
            subprocess.run(["umount", str(mount)], check=False)
    finally:
        subprocess.run(["losetup", "-d", device], check=False)


def write_config(path: Path, mount: Path, tmp_path: Path, **volume: Any) -> None:
    """The daemon's config: a free_space probe on MOUNT, and MOUNT's volume growable."""
    document = {
        "probes": [
            {"name": "data-free", "type": "free_space", "path": str(mount), "interval": 0.5,
             "timeout": 0.5, "window_s": 3, "warn_percent": 10, "critical_percent": 2,
             "fail_threshold": 2},
        ],
        "actions": {"signal_trainers": True, "min_trip_interval_s": 0},
        "registry_dir": str(tmp_path / "registry"),
        "grow": {
            "request_dir": str(tmp_path / "requests"),
            "state_dir": str(tmp_path / "state"),
            "retry_s": 5,
            "volumes": [{"path": str(mount), "region": REGION, "step_gb": 1, "max_gb": 3,
                         "when_s": 30, "api_wait_s": 20, "kernel_wait_s": 5, **volume}],
        },
    }  # fmt: skip
    path.write_text(json.dumps(document))


def helper(config: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **SANDBOX_ENV, "PYTHONPATH": str(REPO / "provision")}
    env.pop("AWS_PROFILE", None)
    return subprocess.run(
        [sys.executable, "-m", "nodeprep.heartbeat.grow_helper", "--config", str(config)],
        capture_output=True, text=True, env=env, timeout=180, check=False,
    )  # fmt: skip


def gib_of(ec2: Any, volume_id: str) -> int:
    return int(ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["Size"])


def answer_of(tmp_path: Path) -> dict[str, Any]:
    return dict(json.loads((tmp_path / "state" / "volume-0.json").read_text()))


def ask(tmp_path: Path, config: Path, name: str) -> dict[str, Any]:
    """One request answered by the helper, as the path unit would start it (its id: the
    32 hex digits of NAME's md5, as the daemon's are a uuid4's)."""
    request_id = hashlib.md5(name.encode()).hexdigest()
    (tmp_path / "requests" / "volume-0.request").write_text(
        json.dumps({"id": request_id, "volume": 0, "reason": name})
    )
    done = helper(config)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "requests" / "volume-0.request").exists()
    answer = answer_of(tmp_path)
    assert answer["request_id"] == request_id
    return answer


def fill_under_the_daemon(
    config: Path, mount: Path, tmp_path: Path
) -> tuple[Daemon, list[subprocess.CompletedProcess[str]], list[str]]:
    """The daemon watching ``mount`` while it fills at 32 MiB/s to 60 %, the helper answering
    its requests; (the daemon, the helper's runs, what went wrong)."""
    stop = threading.Event()
    problems: list[str] = []
    runs: list[subprocess.CompletedProcess[str]] = []

    def path_unit() -> None:
        while not stop.is_set():
            if any((tmp_path / "requests").glob("*.request")):
                runs.append(helper(config))
            stop.wait(0.2)

    def filler() -> None:
        """32 MiB/s of new files up to 60 % full: the disk fills, never to critical."""
        count = 0
        while not stop.is_set():
            stats = os.statvfs(mount)
            if stats.f_bavail < 0.4 * stats.f_blocks:
                return
            try:
                with open(mount / f"fill-{count}", "wb") as handle:
                    os.posix_fallocate(handle.fileno(), 0, 8 * 2**20)
            except OSError as err:
                problems.append(f"fill-{count}: {err}")
                return
            count += 1
            stop.wait(0.25)

    daemon = Daemon(config_mod.load(config), nvml=None)
    threads = [threading.Thread(target=daemon.run, args=(stop,), daemon=True)]
    threads += [threading.Thread(target=t, daemon=True) for t in (path_unit, filler)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and threads[2].is_alive():
            time.sleep(0.5)
        time.sleep(2)  # readings after the refusal: none may warn again
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    return daemon, runs, problems


@pytest.fixture
def setup(ec2: Any, tmp_path: Path) -> Iterator[tuple[str, str, Path, Path]]:
    """A 1 GiB EBS volume in moto and, standing for it on this machine, 1 GiB of mounted ext4
    on a loop device; yields (volume id, device, mount point, config path)."""
    volume_id = make_volume(ec2, size=1)
    for sub in ("registry", "requests", "state"):
        (tmp_path / sub).mkdir()
    with loop_ext4(tmp_path, 1) as (device, _image, mount):
        yield volume_id, device, mount, tmp_path / "heartbeat.json"


def test_at_its_maximum_the_volume_is_not_grown_and_the_trainers_are_warned_once(
    ec2: Any, moto_endpoint: str, tmp_path: Path, setup: tuple[str, str, Path, Path]
) -> None:
    volume_id, device, mount, config = setup
    write_config(config, mount, tmp_path, volume_id=volume_id, device=device,
                 endpoint_url=moto_endpoint, max_gb=1, step_gb=1)  # fmt: skip
    daemon, runs, problems = fill_under_the_daemon(config, mount, tmp_path)
    assert not problems, problems
    assert [run.returncode for run in runs] == [0]  # held: one request while at the maximum
    answer = answer_of(tmp_path)
    assert (answer["outcome"], answer["kind"]) == ("refused", "maximum"), answer
    assert f"{volume_id} is 1 GiB, its maximum (max_gb 1)" in answer["message"]
    assert "full in" in answer["reason"]
    assert daemon.grow is not None
    volume = daemon.grow.volumes[0]
    assert volume.held_until == float("inf")
    assert volume.grown_total == 0
    assert daemon.actions.ledger.total.get("trip") == 1
    text = metrics.render(daemon.snapshot())
    key = f'path="{mount}",volume_id="{volume_id}"'
    assert f"nodeprep_heartbeat_volume_growth_refusals_total{{{key}}} 1.0" in text
    assert f"nodeprep_heartbeat_volume_growths_total{{{key}}} 0.0" in text
    assert gib_of(ec2, volume_id) == 1
    assert ec2.describe_volumes_modifications(VolumeIds=[volume_id])["VolumesModifications"] == []


def test_inside_the_cooldown_growth_is_refused_with_the_time_it_becomes_possible(
    ec2: Any, moto_endpoint: str, tmp_path: Path, setup: tuple[str, str, Path, Path]
) -> None:
    volume_id, device, mount, config = setup
    ec2.modify_volume(VolumeId=volume_id, Size=2)  # a minute ago, by anyone
    write_config(config, mount, tmp_path, volume_id=volume_id, device=device,
                 endpoint_url=moto_endpoint, max_gb=10, cooldown_hours=6)  # fmt: skip
    answer = ask(tmp_path, config, "cooldown")
    assert (answer["outcome"], answer["kind"]) == ("refused", "cooldown"), answer
    assert "one modification per volume every 6 hours, so retry after" in answer["message"]
    assert answer["next_possible_at"] > time.time() + 5.9 * 3600
    assert gib_of(ec2, volume_id) == 2
    log = (tmp_path / "state" / "growth.log").read_text().splitlines()
    assert [json.loads(line)["reason"] for line in log] == ["cooldown"]


def test_a_path_that_is_not_on_the_volume_is_refused_before_any_api_call(
    ec2: Any, moto_endpoint: str, tmp_path: Path, setup: tuple[str, str, Path, Path]
) -> None:
    volume_id, device, _mount, config = setup
    (tmp_path / "elsewhere").mkdir()
    # EC2 at a closed port: any API call would turn the refusal into "EC2 did not answer".
    write_config(config, tmp_path / "elsewhere", tmp_path, volume_id=volume_id, device=device,
                 endpoint_url="http://127.0.0.1:9", cooldown_hours=0, max_gb=10)  # fmt: skip
    answer = ask(tmp_path, config, "wrong-disk")
    assert answer["outcome"] == "refused", answer
    assert f"{tmp_path / 'elsewhere'} is on " in answer["message"]
    assert f"not on {device} (volume {volume_id})" in answer["message"]
    assert gib_of(ec2, volume_id) == 1
    assert ec2.describe_volumes_modifications(VolumeIds=[volume_id])["VolumesModifications"] == []


def has_cap_sys_resource() -> bool:
    """Whether this process may grow a mounted ext4 (the kernel asks for CAP_SYS_RESOURCE)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 24 & 1)
    return False


def test_a_gcp_disk_is_grown_with_the_vms_own_token_and_never_beyond_its_maximum(
    tmp_path: Path, setup: tuple[str, str, Path, Path]
) -> None:
    _volume_id, device, mount, config = setup
    with CloudStandIn("gcp") as metadata, GceStandIn(GCP_TOKEN, GCP_PROJECT) as gce:
        gce.add_disk(GCP_ZONE, "train-data", 1)
        volume = {"provider": "gcp", "disk": "train-data", "device": device, "max_gb": 1,
                  "metadata_url": metadata.url, "endpoint_url": gce.url}  # fmt: skip

        # At its maximum: refused, with the VM's token and no resize.
        write_config(config, mount, tmp_path, **volume)
        at_max = ask(tmp_path, config, "at-max")
        assert (at_max["outcome"], at_max["kind"]) == ("refused", "maximum"), at_max
        assert "train-data is 1 GiB, its maximum (max_gb 1)" in at_max["message"]
        paths = [path for method, path in metadata.requests if method == "GET"]
        assert "/computeMetadata/v1/instance/service-accounts/default/token" in paths

        # A metadata server that does not answer: no credentials, said as such.
        write_config(config, mount, tmp_path, **{**volume, "metadata_url": "http://127.0.0.1:9"})
        silent = ask(tmp_path, config, "no-metadata")
        assert (silent["outcome"], silent["kind"]) == ("refused", "no-credentials"), silent
        assert "the metadata server at http://127.0.0.1:9 did not answer" in silent["message"]
        assert gce.resizes == []

        # Room for one more GiB: disks.resize, the disk grows under the node, then the grow.
        write_config(config, mount, tmp_path, **{**volume, "max_gb": 2})
        image = tmp_path / "disk.img"

        def hypervisor() -> None:
            """Grow the loop device once the stand-in has resized the disk, as GCE would."""
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and gce.size(GCP_ZONE, "train-data") < 2:
                time.sleep(0.2)
            with open(image, "r+b") as handle:
                handle.truncate(2 * GIB)
            subprocess.run(["losetup", "-c", device], check=True)

        thread = threading.Thread(target=hypervisor, daemon=True)
        thread.start()
        answer = ask(tmp_path, config, "grow")
        thread.join(timeout=60)
        assert gce.resizes == [("train-data", 2)]
        assert int(subprocess.run(["blockdev", "--getsize64", device], capture_output=True,
                                  text=True, check=True).stdout) == 2 * GIB  # fmt: skip
        again = ask(tmp_path, config, "again")
        if has_cap_sys_resource():
            assert answer["outcome"] == "grown", answer
            assert (answer["from_gb"], answer["size_gb"]) == (1, 2)
            assert answer["fs_bytes_after"] > 1.9 * GIB
            assert answer["next_possible_at"] is None  # persistent disks have no cooldown
            assert (again["outcome"], again["kind"]) == ("refused", "maximum"), again
        else:  # root without CAP_SYS_RESOURCE (the test machines): the kernel refuses, said so
            assert answer["outcome"] == "failed", answer
            assert f"resize2fs {device} failed" in answer["message"], answer
            assert "Permission denied" in answer["message"], answer
            # The next request finishes that growth first, with no second resize: here the
            # kernel refuses again, and it says so again.
            assert again["outcome"] == "failed", again
            assert f"resize2fs {device} failed" in again["message"], again
        assert gce.resizes == [("train-data", 2)]
