"""Growing a volume: the EBS checks and waits, finding the disk, growing partition and filesystem.

The one implementation behind roles/volume_grow (the modules ``volume_grow_ebs`` and
``volume_grow_device``) and the heartbeat's growth action (``nodeprep.heartbeat.grow_helper``;
``nodeprep.heartbeat.volume_grow`` is a symlink to this file). Standard library and
Python 3.8 only, for the module_utils use.

Nothing here imports boto3 or Ansible: EC2 calls take a client the caller made (the module's
``AnsibleAWSModule.client``, the helper's ``boto3.client``), commands run through a
``run(argv) -> (rc, stdout, stderr)`` the caller gives (``AnsibleModule.run_command``, or
:func:`run_command`). Every refusal is a :class:`GrowError` whose text is one sentence that
names the volume and the fix.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, List, Tuple

Run = Callable[[List[str]], Tuple[int, str, str]]

VOLUME_ID = re.compile(r"^vol-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
GCE_API = "https://compute.googleapis.com/compute/v1"
# A GCE resource name (disks, zones): RFC 1035 labels, as the API accepts them.
GCE_NAME = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
USABLE = ("optimizing", "completed")
GROWABLE = ("ext2", "ext3", "ext4", "xfs")
GIB = 1024**3


class GrowError(Exception):
    """A grow that must not go ahead, or did not finish; ``str()`` says which and why."""


class CooldownError(GrowError):
    """A grow inside EC2's cooldown; ``retry_at`` is when the next one is accepted."""

    def __init__(self, message: str, retry_at: datetime) -> None:
        super().__init__(message)
        self.retry_at = retry_at


def run_command(argv: list[str]) -> tuple[int, str, str]:
    """Run ``argv`` without a shell; (rc, stdout, stderr), rc 127 when it cannot start."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except OSError as err:
        return 127, "", f"{argv[0]}: {err.strerror or err}"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} did not finish within 300 s"
    return done.returncode, done.stdout, done.stderr


def _error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore ClientError (without importing botocore), else None."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return None


# ---------------------------------------------------------------------------------- EBS


def ebs_describe(ec2: Any, volume_id: str, region: str | None) -> dict[str, Any]:
    """The volume as DescribeVolumes returns it; an unknown id is a GrowError."""
    try:
        volume: dict[str, Any] = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
    except Exception as exc:
        if _error_code(exc) in ("InvalidVolume.NotFound", "InvalidVolume.Malformed"):
            raise GrowError(
                f"EBS volume {volume_id} does not exist in region {region}; "
                "check the id in volume_grow_volumes."
            ) from exc
        raise
    return volume


def ebs_modifications(ec2: Any, volume_id: str) -> list[dict[str, Any]]:
    """The volume's modifications, oldest first (none: an empty list)."""
    try:
        found = ec2.describe_volumes_modifications(VolumeIds=[volume_id])
    except Exception as exc:
        if _error_code(exc) == "InvalidVolumeModification.NotFound":
            return []
        raise
    return sorted(found.get("VolumesModifications", []), key=lambda m: m["StartTime"])


def ebs_next_modification(
    history: list[dict[str, Any]], cooldown_hours: float
) -> tuple[datetime, datetime] | None:
    """(last modification, earliest next one) when the volume was ever modified, else None."""
    if not history:
        return None
    last: datetime = history[-1]["StartTime"]
    return last, last + timedelta(hours=cooldown_hours)


def ebs_plan(
    ec2: Any,
    volume_id: str,
    size_gb: int,
    cooldown_hours: float,
    region: str | None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Check a grow of ``volume_id`` to ``size_gb`` GiB before anything changes.

    Refuses a shrink and a grow inside EC2's cooldown (with the time it becomes possible);
    returns what a resize must preserve (type, IOPS, throughput).
    """
    volume = ebs_describe(ec2, volume_id, region)
    current = int(volume["Size"])
    if size_gb < current:
        raise GrowError(
            f"Refusing to shrink EBS volume {volume_id} from {current} GiB to {size_gb} GiB: "
            f"EBS volumes can only grow; set size_gb to {current} or more."
        )
    plan = dict(
        volume_id=volume_id,
        current_size_gb=current,
        target_size_gb=size_gb,
        needs_grow=size_gb > current,
        volume_type=volume.get("VolumeType"),
        iops=volume.get("Iops"),
        throughput=volume.get("Throughput"),
        zone=volume.get("AvailabilityZone"),
    )
    window = ebs_next_modification(ebs_modifications(ec2, volume_id), cooldown_hours)
    if plan["needs_grow"] and window is not None:
        last, retry_at = window
        if (now or datetime.now(timezone.utc)) < retry_at:
            raise CooldownError(
                f"EBS volume {volume_id} was modified at {last.isoformat()}; EC2 allows one "
                f"modification per volume every {cooldown_hours:g} hours, so retry after "
                f"{retry_at.isoformat()}.",
                retry_at,
            )
    return plan


def ebs_modify(ec2: Any, plan: dict[str, Any]) -> None:
    """ModifyVolume to the plan's size, passing its type, IOPS and throughput back unchanged."""
    request: dict[str, Any] = {
        "VolumeId": plan["volume_id"],
        "Size": plan["target_size_gb"],
        "VolumeType": plan["volume_type"],
    }
    if plan["volume_type"] in ("gp3", "io1", "io2") and plan.get("iops"):
        request["Iops"] = plan["iops"]
    if plan["volume_type"] == "gp3" and plan.get("throughput"):
        request["Throughput"] = plan["throughput"]
    ec2.modify_volume(**request)


def ebs_wait(
    ec2: Any,
    volume_id: str,
    wait_seconds: float,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Poll until the newest modification is usable (optimizing or completed); return it."""
    deadline = time.monotonic() + wait_seconds
    while True:
        history = ebs_modifications(ec2, volume_id)
        state = history[-1]["ModificationState"] if history else "none"
        if state in USABLE:
            return history[-1]
        if state == "failed":
            raise GrowError(
                "The modification of EBS volume {} failed: {}".format(
                    volume_id, history[-1].get("StatusMessage", "no reason given")
                )
            )
        if time.monotonic() > deadline:
            raise GrowError(
                f"EBS volume {volume_id} did not reach optimizing within "
                f"{wait_seconds:g} s (state {state}); "
                "raise volume_grow_api_wait_seconds or check the AWS console."
            )
        sleep(2)


# ---------------------------------------------------------------------------------- GCE


class GceError(GrowError):
    """The GCE API answered with an error; ``status`` is its HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Gce:
    """The few calls of GCE's disks API that a resize needs, over HTTPS with the standard
    library, at a base URL the caller may point elsewhere (the tests' stand-in).

    google.cloud's modules would need google-auth and requests on the controller, and they
    always call compute.googleapis.com, so no test here could aim them at a local endpoint.
    """

    def __init__(
        self, project: str, zone: str, token: str, endpoint: str = GCE_API, timeout: float = 30
    ) -> None:
        self.project, self.zone, self.token = project, zone, token
        self.endpoint, self.timeout = endpoint.rstrip("/"), timeout

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """``path`` under the project; the decoded answer, or GceError / GrowError."""
        url = f"{self.endpoint}/projects/{self.project}/{path}"
        request = urllib.request.Request(
            url,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                found: dict[str, Any] = json.loads(answer.read() or b"{}")
                return found
        except urllib.error.HTTPError as err:
            raise GceError(_gce_reason(err), err.code) from err
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            raise GrowError(f"The GCE API at {self.endpoint} did not answer: {reason}") from err

    def disk(self, name: str) -> dict[str, Any]:
        """The disk in this zone; not there, a GrowError naming the zone it is in, if any."""
        try:
            return self.call("GET", f"zones/{self.zone}/disks/{name}")
        except GceError as err:
            if err.status in (401, 403):
                raise GrowError(
                    f"GCE refused to read disk {name} in project {self.project} ({err}); the "
                    "token's account needs compute.disks.get and compute.disks.resize."
                ) from err
            if err.status != 404:
                raise
        try:
            zones = self.zones_of(name)
        except GceError as err:  # listing needs compute.disks.list, which may be missing
            raise GrowError(
                f"GCP disk {name} does not exist in zone {self.zone} of project "
                f"{self.project} (and listing its disks to find it elsewhere was refused: "
                f"{err}); check gce_disk and the zone."
            ) from err
        if zones:
            raise GrowError(
                f"GCP disk {name} is in zone {', '.join(zones)}, not {self.zone}; set the "
                "volume's zone (or volume_grow_gcp_zone) to where the disk is."
            )
        raise GrowError(
            f"GCP disk {name} does not exist in project {self.project}; check gce_disk in "
            "volume_grow_volumes."
        )

    def zones_of(self, name: str) -> list[str]:
        """The zones where the project has a disk called ``name`` (an aggregated list)."""
        query = urllib.parse.urlencode({"filter": f"name = {name}"})
        found = self.call("GET", f"aggregated/disks?{query}")
        zones = []
        for scope, listed in (found.get("items") or {}).items():
            names = [d.get("name") for d in listed.get("disks", [])]
            if scope.startswith("zones/") and name in names:
                zones.append(scope.split("/", 1)[1])
        return sorted(zones)


def _gce_reason(err: urllib.error.HTTPError) -> str:
    """GCE's own error message, else the HTTP status line."""
    try:
        message = json.loads(err.read() or b"{}").get("error", {}).get("message")
    except (ValueError, AttributeError, OSError):
        message = None
    return f"HTTP {err.code}: {message or err.reason}"


def gce_plan(gce: Gce, name: str, size_gb: int) -> dict[str, Any]:
    """Check a resize of disk ``name`` to ``size_gb`` GiB before anything changes."""
    disk = gce.disk(name)
    current = int(disk["sizeGb"])
    if size_gb < current:
        raise GrowError(
            f"Refusing to shrink GCP disk {name} from {current} GiB to {size_gb} GiB: "
            f"persistent disks can only grow; set size_gb to {current} or more."
        )
    return dict(
        disk=name,
        zone=gce.zone,
        project=gce.project,
        current_size_gb=current,
        target_size_gb=size_gb,
        needs_grow=size_gb > current,
        disk_type=str(disk.get("type", "")).rsplit("/", 1)[-1],
    )


def gce_resize(
    gce: Gce, name: str, size_gb: int, wait_seconds: float,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:  # fmt: skip
    """disks.resize, then poll its zone operation until DONE; the finished operation."""
    operation = gce.call("POST", f"zones/{gce.zone}/disks/{name}/resize", {"sizeGb": str(size_gb)})
    deadline = time.monotonic() + wait_seconds
    while operation.get("status") != "DONE":
        if time.monotonic() > deadline:
            raise GrowError(
                f"The resize of GCP disk {name} was not done within {wait_seconds:g} s (status "
                f"{operation.get('status')}); raise the wait or look up operation "
                f"{operation.get('name')} in the console."
            )
        sleep(1)
        operation = gce.call("GET", f"zones/{gce.zone}/operations/{operation['name']}")
    errors = (operation.get("error") or {}).get("errors") or []
    if errors:
        raise GrowError(
            f"The resize of GCP disk {name} to {size_gb} GiB failed: "
            + "; ".join(str(e.get("message", e)) for e in errors)
        )
    return operation


# ------------------------------------------------------------------------------- device


def by_id(volume_id: str) -> str:
    """The disk of an EC2 volume: the /dev/disk/by-id link ending in the id without its dash."""
    suffix = volume_id.replace("-", "")
    links = [p for p in sorted(glob.glob("/dev/disk/by-id/*")) if p.endswith(suffix)]
    if not links:
        raise GrowError(
            f"No block device on this node belongs to EBS volume {volume_id} (no "
            f"/dev/disk/by-id link ends in {suffix}); attach the volume or set device."
        )
    return os.path.realpath(links[0])


def lsblk(run: Run, device: str) -> dict[str, Any]:
    """lsblk's JSON tree of ``device`` (name, path, type, fstype, mountpoint, size, pkname)."""
    rc, out, err = run(
        ["lsblk", "--json", "--bytes", "--output",
         "NAME,PATH,TYPE,FSTYPE,MOUNTPOINT,SIZE,PKNAME", device]
    )  # fmt: skip
    if rc != 0:
        raise GrowError(
            f"{device} is not a block device on this node ({err.strip()}); check the device "
            "in volume_grow_volumes."
        )
    found: dict[str, Any] = json.loads(out)["blockdevices"][0]
    return found


def from_mount(run: Run, mount: str) -> str:
    """The whole disk under the filesystem mounted at (or holding) ``mount``."""
    rc, out, err = run(["findmnt", "--json", "--output", "SOURCE", "--target", mount])
    if rc != 0:
        raise GrowError(
            f"Nothing is mounted at {mount} ({err.strip()}); fix the mount or the mount "
            "point in volume_grow_volumes."
        )
    source: str = json.loads(out)["filesystems"][0]["source"]
    if not source.startswith("/dev/"):
        raise GrowError(
            f"{mount} is on {source}, not on a block device; nodeprep grows only disks."
        )
    parent = lsblk(run, source).get("pkname")
    return "/dev/" + parent if parent else source


def by_gce_name(name: str) -> str:
    """The disk of a GCE persistent disk: /dev/disk/by-id/google-<device name>, which is the
    disk's name unless it was attached under another device name."""
    link = f"/dev/disk/by-id/google-{name}"
    if not os.path.exists(link):
        raise GrowError(
            f"No block device on this node is GCP disk {name} (no {link}); it was attached "
            "under another device name, or not to this node: set device."
        )
    return os.path.realpath(link)


def resolve_disk(
    run: Run, volume_id: str | None, device: str | None, mount: str | None,
    gce_disk: str | None = None,
) -> str:  # fmt: skip
    """The whole disk named by a volume id (EBS), a disk name (GCE), a device or a mount
    point (an id or name and a device must agree)."""
    named = os.path.realpath(device) if device else None
    try:
        disk = by_id(volume_id) if volume_id else by_gce_name(gce_disk) if gce_disk else None
    except GrowError:
        if named is None:
            raise
        disk = None  # no by-id link (Xen, a custom device name): the device given decides
    if disk and named and disk != named:
        raise GrowError(
            f"{'EBS volume ' + volume_id if volume_id else 'GCP disk ' + str(gce_disk)} is "
            f"{disk} on this node, not {named}; refusing to touch a device that is not the "
            "volume's."
        )
    found = disk or named
    if found is None:
        if not mount:
            raise GrowError("Name the volume by its id, its device or a mount point on it.")
        found = from_mount(run, mount)
    return found


def disk_bytes(device: str) -> int:
    """The device's size in bytes, as the kernel sees it now (sysfs)."""
    name = os.path.basename(os.path.realpath(device))
    with open(f"/sys/class/block/{name}/size") as handle:
        return int(handle.read()) * 512


def refuse_shrink(disk: str, size_gb: int) -> None:
    """A size of 0 or less, or below the disk's size now, is a mistake: volumes only grow."""
    current = disk_bytes(disk)
    if size_gb < 1 or current > size_gb * GIB:
        raise GrowError(
            f"size_gb {size_gb} for {disk} is below its current {current / GIB:.1f} GiB; "
            f"volumes only grow, so set size_gb to {-(-current // GIB)} or more, or leave it out."
        )


def wait_for_size(
    disk: str, size_gb: int, wait_seconds: float, sleep: Callable[[float], None] = time.sleep
) -> None:
    """Wait (bounded) until the kernel sees ``disk`` at least ``size_gb`` GiB large."""
    deadline = time.monotonic() + wait_seconds
    while disk_bytes(disk) < size_gb * GIB:
        if time.monotonic() > deadline:
            raise GrowError(
                f"The kernel still sees {disk} as {disk_bytes(disk) / GIB:.1f} GiB after "
                f"{wait_seconds:g} s, less than the {size_gb} GiB requested; "
                "check that the volume was resized and attached to this node."
            )
        sleep(1)


def target(run: Run, disk: str) -> tuple[dict[str, Any], str | None, int | None]:
    """The node holding the filesystem (its one partition, or the disk), its path and number."""
    tree = lsblk(run, disk)
    if tree["type"] != "disk" and tree["type"] != "loop":
        raise GrowError(
            "{} is a {}, not a whole disk; name the disk (e.g. /dev/vdb), not a partition.".format(
                disk, tree["type"]
            )
        )
    parts = [c for c in tree.get("children") or [] if c["type"] == "part"]
    if not parts:
        return with_fstype(run, tree), None, None
    if len(parts) > 1:
        raise GrowError(
            f"{disk} has {len(parts)} partitions; nodeprep grows only disks with one "
            "partition, so grow this one by hand."
        )
    part = parts[0]
    with open("/sys/class/block/{}/partition".format(part["name"])) as handle:
        number = int(handle.read())
    return with_fstype(run, part), part["path"], number


def with_fstype(run: Run, node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with its filesystem type; lsblk takes it from udev, which containers and
    early boot may lack, so an empty one is probed from the device itself (blkid -p)."""
    if node.get("fstype"):
        return node
    rc, out, _ = run(["blkid", "-p", "-o", "value", "-s", "TYPE", node["path"]])
    return {**node, "fstype": out.strip() or None} if rc == 0 else node


def check_fstype(fstype: str | None, where: str) -> str:
    """The filesystem type when nodeprep grows it; a GrowError naming it otherwise."""
    if fstype == "LVM2_member":
        raise GrowError(
            f"{where} holds an LVM physical volume; nodeprep does not grow LVM yet, "
            "so run pvresize and lvextend by hand."
        )
    if fstype not in GROWABLE:
        raise GrowError(
            "{} has filesystem {}, which nodeprep does not grow (it grows {}); "
            "left untouched.".format(where, fstype or "none/unknown", ", ".join(GROWABLE))
        )
    return fstype


def fs_growable(run: Run, device: str, fstype: str) -> bool:
    """Whether the filesystem can gain at least one block from its device.

    community.general.filesystem compares sizes to the byte, so an ext filesystem whose
    device ends in a partial block would be "grown" (a no-op) on every run; xfs has its
    own slack there.
    """
    if not fstype.startswith("ext"):
        return True
    rc, out, err = run(["dumpe2fs", "-h", device])
    if rc != 0:
        raise GrowError(f"dumpe2fs cannot read {device} ({err.strip()}); check the filesystem.")
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    block = int(fields["Block size"])
    return disk_bytes(device) - int(fields["Block count"]) * block >= block


def grow_partition(run: Run, disk: str, number: int) -> bool:
    """growpart the partition to fill its disk; True when it changed (NOCHANGE is not an error)."""
    rc, out, err = run(["growpart", disk, str(number)])
    if rc != 0 and "NOCHANGE" not in out:
        raise GrowError(
            f"growpart {disk} {number} failed (exit {rc}): {(err or out).strip()[-300:]}"
        )
    return "CHANGED" in out


def grow_filesystem(run: Run, device: str, fstype: str, mountpoint: str | None) -> None:
    """Grow the filesystem online to fill ``device``: resize2fs for ext, xfs_growfs for xfs.

    These are the tools community.general.filesystem runs for ``resizefs: true``.
    """
    if fstype == "xfs":
        if not mountpoint:
            raise GrowError(f"xfs on {device} grows only while mounted; mount it first.")
        argv = ["xfs_growfs", mountpoint]
    else:
        argv = ["resize2fs", device]
    rc, out, err = run(argv)
    if rc != 0:
        raise GrowError(f"{' '.join(argv)} failed (exit {rc}): {(err or out).strip()[-300:]}")
