"""``python -m nodeprep.heartbeat.grow_helper --config FILE``: the growth action's root half.

Started (as root) by ``nodeprep-volume-grow.path`` when the daemon leaves a request in the
config's ``grow.request_dir``. For each request it:

1. takes only the volume's index from the request; every parameter comes from the root-owned
   config file (the daemon's own user cannot widen what gets grown);
2. checks on the node first that the volume's disk is the one under the volume's path, so no
   API call is made for a disk this node cannot grow;
3. computes the next size: current + ``step_gb``, never above ``max_gb`` (at the maximum: a
   refusal of kind ``maximum``); EC2's cooldown is checked against the volume's newest
   modification (a refusal of kind ``cooldown`` with the time the next one is accepted);
4. ModifyVolume (type, IOPS and throughput passed back unchanged) or disks.resize, waits
   until the kernel sees
   the new size, then growpart (when the filesystem is on a partition) and the filesystem's
   online grow: the same functions roles/volume_grow's modules use (``volume_grow``, a symlink
   to the collection's module_utils);
5. writes the outcome atomically to ``grow.state_dir/volume-N.json`` and appends it to
   ``grow.state_dir/growth.log`` (one JSON object per line); the daemon reads the first.

Credentials come from boto3's normal chain; on an EC2 node that is the instance role through
the metadata service. A GCP persistent disk (``provider: gcp``) is resized with the VM's own
service-account token from the metadata server, through the ``Gce`` client roles/volume_grow
uses; it has no cooldown. Exit status: 0 when every request was answered (grown or refused),
2 for a bad config.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import stat
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodeprep.heartbeat import cloud_metadata
from nodeprep.heartbeat import config as config_mod
from nodeprep.heartbeat import volume_grow as vg
from nodeprep.heartbeat.config import GrowConfig, GrowVolume
from nodeprep.heartbeat.grow import (
    COOLDOWN,
    FAILED,
    GROWN,
    MAXIMUM,
    REFUSED,
    request_path,
    result_path,
    write_atomic,
)  # fmt: skip

log = logging.getLogger("nodeprep.heartbeat.grow_helper")


class Refused(Exception):
    """Growth that must not happen now; ``kind`` says which rule, ``retry_at`` when it may."""

    def __init__(self, message: str, kind: str = "", retry_at: float | None = None) -> None:
        super().__init__(message)
        self.kind, self.retry_at = kind, retry_at


def ec2_client(volume: GrowVolume) -> Any:
    """A boto3 EC2 client for the volume's region and endpoint; Refused without boto3."""
    try:
        import boto3
    except ImportError as err:
        raise Refused(
            f"boto3 is not installed in {sys.prefix}, so EBS volumes cannot be grown from this "
            "node; set heartbeat_grow_aws_install: true (or install boto3 there)",
            kind="no-credentials",
        ) from err
    try:
        return boto3.client(
            "ec2", region_name=volume.region or None, endpoint_url=volume.endpoint_url or None
        )
    except Exception as exc:  # botocore's NoRegionError and the like: nothing was called
        raise Refused(
            f"no EC2 client for {volume.volume_id}: {type(exc).__name__}: {exc}; set the "
            "volume's region",
            kind="no-credentials",
        ) from exc


def _disk_under(volume: GrowVolume, run: vg.Run) -> str:
    """The volume's disk, checked to be the one under its path, before any API call."""
    if volume.provider == "gcp":
        disk = vg.resolve_disk(run, None, volume.device, None, volume.disk)
    else:
        disk = vg.resolve_disk(run, volume.volume_id, volume.device, None)
    under = vg.from_mount(run, volume.path)
    if under != disk:
        raise Refused(
            f"{volume.path} is on {under}, not on {disk} (volume {volume.name}); fix "
            "grow.volumes' path or device"
        )
    return disk


def _grow_on_node(volume: GrowVolume, disk: str, run: vg.Run) -> bool:
    """growpart and the online grow, where the disk has room the filesystem does not use;
    whether anything grew."""
    node, partition, number = vg.target(run, disk)
    device = partition or disk
    fstype = vg.check_fstype(node.get("fstype"), device)
    grew = False
    if partition is not None and number is not None:
        grew = vg.grow_partition(run, disk, number)
    # ext: at least a block to gain (dumpe2fs); xfs has no such count: a device over a tenth
    # larger than the filesystem (its log and headers take far less).
    if fstype.startswith("ext"):
        lagging = vg.fs_growable(run, device, fstype)
    else:
        lagging = vg.disk_bytes(device) > 1.1 * _fs_bytes(volume.path)
    if lagging:
        vg.grow_filesystem(run, device, fstype, node.get("mountpoint") or volume.path)
    return grew or lagging


def grow_volume(volume: GrowVolume, run: vg.Run = vg.run_command) -> dict[str, Any]:
    """Grow one volume by a step; the outcome document (raises Refused or vg.GrowError).

    A disk the provider already grew, whose partition or filesystem did not follow (an
    earlier run that failed after the API call), is finished first, with no API call: else
    EC2's cooldown, or on GCP another step, would leave the new space unused.
    """
    disk = _disk_under(volume, run)
    started = time.time()
    fs_before = _fs_bytes(volume.path)
    if _grow_on_node(volume, disk, run):
        size = vg.disk_bytes(disk) // vg.GIB
        return {
            "outcome": GROWN,
            "message": f"finished an earlier growth of {volume.name}: {volume.path} from "
            f"{fs_before / 2**30:.2f} to {_fs_bytes(volume.path) / 2**30:.2f} GiB, with no "
            "API call",
            "from_gb": size,
            "size_gb": size,
            "fs_bytes_before": fs_before,
            "fs_bytes_after": _fs_bytes(volume.path),
            "next_possible_at": None,
        }
    grow = _grow_gce if volume.provider == "gcp" else _grow_ebs
    current, size, next_possible = grow(volume)
    vg.wait_for_size(disk, size, volume.kernel_wait_s)
    _grow_on_node(volume, disk, run)
    fs_after = _fs_bytes(volume.path)
    return {
        "outcome": GROWN,
        "message": f"grew {volume.name} from {current} to {size} GiB and {volume.path} "
        f"from {fs_before / 2**30:.2f} to {fs_after / 2**30:.2f} GiB in "
        f"{time.time() - started:.1f} s",
        "from_gb": current,
        "size_gb": size,
        "fs_bytes_before": fs_before,
        "fs_bytes_after": fs_after,
        "next_possible_at": next_possible,
    }


def _next_size(volume: GrowVolume, current: int) -> int:
    if current >= volume.max_gb:
        raise Refused(
            f"{volume.name} is {current} GiB, its maximum (max_gb {volume.max_gb}); it "
            "will not grow further: free space or raise max_gb",
            kind=MAXIMUM,
        )
    return min(current + volume.step_gb, volume.max_gb)


def _grow_ebs(volume: GrowVolume) -> tuple[int, int, float | None]:
    """ModifyVolume by a step and wait until it is usable; (from, to, next possible time)."""
    ec2 = ec2_client(volume)
    try:
        current = int(vg.ebs_describe(ec2, volume.volume_id, volume.region)["Size"])
    except vg.GrowError:
        raise
    except Exception as exc:  # botocore's NoCredentialsError, ClientError, EndpointConnectionError
        raise Refused(
            f"EC2 did not answer for {volume.volume_id}: {type(exc).__name__}: {exc}",
            kind="no-credentials" if "Credentials" in type(exc).__name__ else "",
        ) from exc
    size = _next_size(volume, current)
    try:
        plan = vg.ebs_plan(ec2, volume.volume_id, size, volume.cooldown_hours, volume.region)
    except vg.CooldownError as exc:
        raise Refused(str(exc), kind=COOLDOWN, retry_at=exc.retry_at.timestamp()) from exc
    vg.ebs_modify(ec2, plan)
    vg.ebs_wait(ec2, volume.volume_id, volume.api_wait_s)
    window = vg.ebs_next_modification(
        vg.ebs_modifications(ec2, volume.volume_id), volume.cooldown_hours
    )
    return current, size, window[1].timestamp() if window else None


def gce_client(volume: GrowVolume) -> vg.Gce:
    """Compute Engine with the VM's own service account, project and zone from the metadata
    server (unless the config names them); Refused when the server gives no token."""
    server = cloud_metadata.GcpMetadata(volume.metadata_url)
    prefix = "/computeMetadata/v1"

    def read(path: str) -> str:
        try:
            status, body = server.get(prefix + path, 5.0)
        except OSError as err:
            raise Refused(
                f"the metadata server at {volume.metadata_url} did not answer ({err}), so "
                f"there are no credentials to grow {volume.disk} with",
                kind="no-credentials",
            ) from err
        if status != 200:
            raise Refused(
                f"the metadata server answered HTTP {status} for {path}; the VM needs a "
                f"service account with the compute scope to grow {volume.disk}",
                kind="no-credentials",
            )
        return body.decode("utf-8", "replace").strip()

    try:
        token = str(json.loads(read("/instance/service-accounts/default/token"))["access_token"])
    except (ValueError, KeyError, TypeError) as err:
        raise Refused(
            f"the metadata server gave no access token for {volume.disk} ({err!r}); the VM "
            "needs a service account with the compute scope",
            kind="no-credentials",
        ) from err
    project = volume.project or read("/project/project-id")
    zone = volume.zone or read("/instance/zone").rsplit("/", 1)[-1]
    return vg.Gce(project, zone, token, volume.endpoint_url or vg.GCE_API)


def _grow_gce(volume: GrowVolume) -> tuple[int, int, float | None]:
    """disks.resize by a step and wait for its operation; (from, to, None: no cooldown)."""
    gce = gce_client(volume)
    current = int(gce.disk(volume.disk)["sizeGb"])
    size = _next_size(volume, current)
    vg.gce_plan(gce, volume.disk, size)
    vg.gce_resize(gce, volume.disk, size, volume.api_wait_s)
    return current, size, None


def _fs_bytes(path: str) -> int:
    stats = os.statvfs(path)
    return stats.f_blocks * stats.f_frsize


def answer(grow: GrowConfig, index: int, request: dict[str, Any]) -> dict[str, Any]:
    """Grow volume ``index`` for ``request``; the outcome, written where the daemon reads it."""
    volume = grow.volumes[index]
    try:
        document = grow_volume(volume)
    except Refused as exc:
        document = {"outcome": REFUSED, "kind": exc.kind, "message": str(exc),
                    "next_possible_at": exc.retry_at}  # fmt: skip
    except vg.GrowError as exc:
        document = {"outcome": FAILED, "kind": "", "message": str(exc)}
    except Exception as exc:  # an answer always comes, or the daemon waits half an hour
        log.exception("growing %s failed", volume.name)
        document = {"outcome": FAILED, "kind": "", "message": f"{type(exc).__name__}: {exc}"}
    document.update(
        request_id=request["id"],
        volume_id=volume.name,
        path=volume.path,
        reason=request["reason"],
        requested_at=request["requested_at"],
        finished_at=time.time(),
        finished=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    write_atomic(result_path(grow, index), document)
    fd = os.open(Path(grow.state_dir) / "growth.log",
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # fmt: skip
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(document, sort_keys=True) + "\n")
    level = logging.WARNING if document["outcome"] == GROWN else logging.ERROR
    log.log(level, "volume=%s path=%s outcome=%s %s", volume.name, volume.path,
            document["outcome"], document["message"])  # fmt: skip
    return document


REQUEST_ID = re.compile(r"^[0-9a-f]{32}$")


def take_request(path: Path, index: int) -> dict[str, Any] | None:
    """The request for volume ``index`` at ``path``, removed; None (logged) when it is not a
    small regular file of the daemon's shape. Only the index chooses what is grown; the id,
    reason and time are echoed back, checked and bounded."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        log.error("ignored %s: %s", path, err.strerror)
        path.unlink(missing_ok=True)
        return None
    try:
        info = os.fstat(fd)
        raw = os.read(fd, 4097) if stat.S_ISREG(info.st_mode) else b""
    finally:
        os.close(fd)
    path.unlink(missing_ok=True)  # taken: a new request while growing starts a new run
    try:
        found = json.loads(raw) if 0 < len(raw) <= 4096 else None
    except ValueError:
        found = None
    if (
        not isinstance(found, dict)
        or found.get("volume") != index
        or not REQUEST_ID.match(str(found.get("id", "")))
    ):
        log.error("ignored a malformed request in %s", path)
        return None
    at = found.get("requested_at")
    return {"id": found["id"], "reason": str(found.get("reason", ""))[:300],
            "requested_at": float(at) if isinstance(at, int | float) else None}  # fmt: skip


def check_state_dir(grow: GrowConfig) -> str | None:
    """Why the answers' directory is unsafe for root to write in, or None."""
    state = Path(grow.state_dir)
    info = state.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        return (f"{state} must be a directory owned by the helper's user and writable by no "
                "one else")  # fmt: skip
    return None


def serve(grow: GrowConfig) -> int:
    """Answer every request now in the request directory; the number answered."""
    answered = 0
    for index in range(len(grow.volumes)):
        path = request_path(grow, index)
        if not path.exists():
            continue
        request = take_request(path, index)
        if request is None:
            continue
        answer(grow, index, request)
        answered += 1
    for stray in sorted(Path(grow.request_dir).glob("*.request")):
        if stray.name not in {request_path(grow, i).name for i in range(len(grow.volumes))}:
            log.error("ignored %s: no volume in the config has that index", stray)
            stray.unlink(missing_ok=True)
    return answered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nodeprep.heartbeat.grow_helper",
        description="Answer the heartbeat's growth requests (as root).",
    )
    parser.add_argument("--config", type=Path, required=True, help="the heartbeat's JSON config")
    args = parser.parse_args(argv)
    logging.basicConfig(level="INFO", stream=sys.stderr, format="%(levelname)s %(message)s")
    try:
        cfg = config_mod.load(args.config)
    except config_mod.ConfigError as err:
        print(f"nodeprep-volume-grow: bad config {args.config}: {err}", file=sys.stderr)
        return 2
    Path(cfg.grow.state_dir).mkdir(mode=0o755, parents=True, exist_ok=True)
    unsafe = check_state_dir(cfg.grow)
    if unsafe:
        print(f"nodeprep-volume-grow: {unsafe}; nothing was grown.", file=sys.stderr)
        return 2
    serve(cfg.grow)
    return 0


if __name__ == "__main__":
    sys.exit(main())
