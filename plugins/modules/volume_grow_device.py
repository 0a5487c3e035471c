#!/usr/bin/python
"""Find the disk, partition and filesystem to grow, and wait until the kernel sees the size."""

from __future__ import annotations

DOCUMENTATION = r"""
module: volume_grow_device
short_description: Resolve a volume to its disk, partition and filesystem on the node.
description:
  - Finds the block device of a volume by its EC2 id (the C(/dev/disk/by-id) link whose
    name ends with the id without its dash, as Nitro NVMe and virtio serials give), by an
    explicit device, or by a mount point. When both an id and a device are given they must
    be the same disk.
  - Waits (bounded) until the kernel reports at least C(size_gb) GiB, reads the partition
    and filesystem from lsblk's JSON output and sysfs (never from the device name), and
    refuses what it must not touch.
  - Reads only; never changes the node. Reports the package that provides C(growpart)
    when a partition must be grown and C(growpart) is not installed, so the role installs
    it only then.
  - Fails, leaving the node untouched, for a disk with more than one partition, an LVM
    physical volume, or a filesystem other than ext2, ext3, ext4 or xfs.
options:
  volume_id:
    description:
      - EC2 volume id, for example C(vol-0123456789abcdef0). The disk is the target of the
        C(/dev/disk/by-id) link whose name ends with the id without its dash.
      - At least one of I(volume_id), I(device) and I(mount) is required.
    type: str
  device:
    description:
      - The whole disk, for example C(/dev/nvme1n1), not a partition. With I(volume_id)
        too, both must name the same disk.
    type: path
  mount:
    description:
      - A mount point on the volume; the disk is the parent of the mounted device. Used
        only when neither I(volume_id) nor I(device) is given.
    type: path
  size_gb:
    description:
      - Wait until the kernel sees the disk at least this large, in GiB. Fails when the
        disk is already larger, because volumes only grow. Left out, nothing is awaited.
    type: int
  wait_seconds:
    description: How long to wait, in seconds, for the kernel to report I(size_gb).
    type: int
    default: 120
notes:
  - Supports check mode; the module only reads.
  - C(dumpe2fs) reads an ext filesystem's device directly, so the role runs this with become.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Find the volume's disk, partition and filesystem once the kernel sees the new size.
  nodeprep.hardening.volume_grow_device:
    volume_id: vol-0123456789abcdef0
    size_gb: 500
    wait_seconds: 120
  register: target
  become: true

- name: Measure the filesystem mounted at /data against its device.
  nodeprep.hardening.volume_grow_device:
    mount: /data
  register: measured
  become: true
"""

RETURN = r"""
disk:
  description: The whole disk that holds the volume.
  returned: always
  type: str
  sample: /dev/nvme1n1
partition:
  description: The partition that holds the filesystem, or null when the filesystem is on
    the whole disk.
  returned: always
  type: str
  sample: /dev/nvme1n1p1
partition_number:
  description: Number of that partition, as growpart expects it, or null without one.
  returned: always
  type: int
  sample: 1
filesystem_device:
  description: The device to grow the filesystem on, the partition or else the disk.
  returned: always
  type: str
  sample: /dev/nvme1n1p1
fstype:
  description: The filesystem type as lsblk reports it (one of ext2, ext3, ext4, xfs).
  returned: always
  type: str
  sample: ext4
mountpoint:
  description: Where the filesystem is mounted, or null when it is not mounted.
  returned: always
  type: str
  sample: /data
disk_bytes:
  description: Size of the disk in bytes, as the kernel sees it now.
  returned: always
  type: int
  sample: 536870912000
growpart_package:
  description:
    - The package that provides C(growpart) on this distribution (C(cloud-guest-utils) on
      Debian and Ubuntu, C(cloud-utils-growpart) on RHEL-like systems, C(growpart) on SUSE)
      when the volume has a partition and C(growpart) is not on the node's PATH; null when
      there is nothing to install.
  returned: always
  type: str
  sample: cloud-guest-utils
fs_growable:
  description:
    - Whether the filesystem can gain at least one block from its device. Always true for
      xfs; for ext filesystems it compares the block count with the device size.
  returned: always
  type: bool
  sample: true
"""

import glob
import json
import os
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

GROWABLE = ("ext2", "ext3", "ext4", "xfs")
# os-release ID / ID_LIKE words -> the package that ships growpart there.
GROWPART_PACKAGES = (
    (("rhel", "fedora", "centos"), "cloud-utils-growpart"),
    (("suse", "opensuse"), "growpart"),
)
DEFAULT_GROWPART_PACKAGE = "cloud-guest-utils"
GIB = 1024**3


def by_id(module: AnsibleModule, volume_id: str) -> str:
    suffix = volume_id.replace("-", "")
    links = [p for p in sorted(glob.glob("/dev/disk/by-id/*")) if p.endswith(suffix)]
    if not links:
        module.fail_json(
            msg=f"No block device on this node belongs to EBS volume {volume_id} (no "
            f"/dev/disk/by-id link ends in {suffix}); attach the volume or set device."
        )
    return os.path.realpath(links[0])


def from_mount(module: AnsibleModule, mount: str) -> str:
    rc, out, err = module.run_command(
        ["findmnt", "--json", "--output", "SOURCE", "--target", mount]
    )
    if rc != 0:
        module.fail_json(
            msg=f"Nothing is mounted at {mount} ({err.strip()}); fix the mount or the mount "
            "point in volume_grow_volumes."
        )
    source: str = json.loads(out)["filesystems"][0]["source"]
    tree = lsblk(module, source)
    parent = tree.get("pkname")
    return "/dev/" + parent if parent else source


def lsblk(module: AnsibleModule, device: str) -> dict[str, Any]:
    rc, out, err = module.run_command(
        [
            "lsblk",
            "--json",
            "--bytes",
            "--output",
            "NAME,PATH,TYPE,FSTYPE,MOUNTPOINT,SIZE,PKNAME",
            device,
        ]
    )
    if rc != 0:
        module.fail_json(
            msg=f"{device} is not a block device on this node ({err.strip()}); check the device "
            "in volume_grow_volumes."
        )
    found: dict[str, Any] = json.loads(out)["blockdevices"][0]
    return found


def disk_bytes(device: str) -> int:
    name = os.path.basename(os.path.realpath(device))
    with open(f"/sys/class/block/{name}/size") as handle:
        return int(handle.read()) * 512


def refuse_shrink(module: AnsibleModule, disk: str, size_gb: int) -> None:
    """A size of 0 or less, or below the disk's size now, is a mistake: volumes only grow."""
    current = disk_bytes(disk)
    if size_gb < 1 or current > size_gb * GIB:
        module.fail_json(
            msg=f"size_gb {size_gb} for {disk} is below its current {current / GIB:.1f} GiB; "
            f"volumes only grow, so set size_gb to {-(-current // GIB)} or more, or leave it out."
        )


def wait_for_size(module: AnsibleModule, disk: str, size_gb: int) -> None:
    deadline = time.monotonic() + module.params["wait_seconds"]
    while disk_bytes(disk) < size_gb * GIB:
        if time.monotonic() > deadline:
            module.fail_json(
                msg=f"The kernel still sees {disk} as {disk_bytes(disk) / GIB:.1f} GiB after "
                f"{module.params['wait_seconds']} s, less than the {size_gb} GiB requested; "
                "check that the volume was resized and attached to this node."
            )
        time.sleep(1)


def target(module: AnsibleModule, disk: str) -> tuple[dict[str, Any], str | None, int | None]:
    """The partition to grow (the one holding the filesystem) or the whole disk."""
    tree = lsblk(module, disk)
    if tree["type"] != "disk":
        module.fail_json(
            msg="{} is a {}, not a whole disk; name the disk (e.g. /dev/vdb), not "
            "a partition.".format(disk, tree["type"])
        )
    parts = [c for c in tree.get("children") or [] if c["type"] == "part"]
    if not parts:
        return tree, None, None
    if len(parts) > 1:
        module.fail_json(
            msg=f"{disk} has {len(parts)} partitions; nodeprep grows only disks with one "
            "partition, so grow this one by hand."
        )
    part = parts[0]
    with open("/sys/class/block/{}/partition".format(part["name"])) as handle:
        number = int(handle.read())
    return part, part["path"], number


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            volume_id=dict(type="str"),
            device=dict(type="path"),
            mount=dict(type="path"),
            size_gb=dict(type="int"),
            wait_seconds=dict(type="int", default=120),
        ),
        required_one_of=[["volume_id", "device", "mount"]],
        supports_check_mode=True,
    )
    p = module.params
    disk = by_id(module, p["volume_id"]) if p["volume_id"] else None
    named = os.path.realpath(p["device"]) if p["device"] else None
    if disk and named and disk != named:
        module.fail_json(
            msg="EBS volume {} is {} on this node, not {}; refusing to touch a "
            "device that is not the volume's.".format(p["volume_id"], disk, named)
        )
    disk = disk or named or from_mount(module, p["mount"])
    if p["size_gb"] is not None:
        refuse_shrink(module, disk, p["size_gb"])
        wait_for_size(module, disk, p["size_gb"])
    node, partition, number = target(module, disk)
    fstype = node.get("fstype")
    if fstype == "LVM2_member":
        module.fail_json(
            msg="%s holds an LVM physical volume; nodeprep does not grow LVM yet, "
            "so run pvresize and lvextend by hand." % (partition or disk)
        )
    if fstype not in GROWABLE:
        module.fail_json(
            msg="{} has filesystem {}, which nodeprep does not grow (it grows {}); "
            "left untouched.".format(
                partition or disk, fstype or "none/unknown", ", ".join(GROWABLE)
            )
        )
    assert fstype is not None  # fail_json above exits unless fstype is one of GROWABLE
    module.exit_json(
        changed=False,
        disk=disk,
        partition=partition,
        partition_number=number,
        filesystem_device=partition or disk,
        fstype=fstype,
        mountpoint=node.get("mountpoint"),
        disk_bytes=disk_bytes(disk),
        fs_growable=fs_growable(module, partition or disk, fstype),
        growpart_package=None if partition is None else missing_growpart(module),
    )


def missing_growpart(module: AnsibleModule) -> str | None:
    """The package to install for growpart, or None when growpart is already on PATH."""
    if module.get_bin_path("growpart") is not None:
        return None
    return growpart_package(os_release_words())


def os_release_words(path: str = "/etc/os-release") -> set[str]:
    """The words of os-release's ID and ID_LIKE, lower-cased (empty when unreadable)."""
    words: set[str] = set()
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return words
    for line in lines:
        key, _, value = line.partition("=")
        if key in ("ID", "ID_LIKE"):
            words.update(value.strip().strip("\"'").lower().split())
    return words


def growpart_package(words: set[str]) -> str:
    """Which package ships growpart on a distribution with these os-release words."""
    for ids, package in GROWPART_PACKAGES:
        if words.intersection(ids):
            return package
    return DEFAULT_GROWPART_PACKAGE


def fs_growable(module: AnsibleModule, device: str, fstype: str) -> bool:
    """Whether the filesystem can gain at least one block from its device.

    community.general.filesystem compares sizes to the byte, so an ext filesystem whose
    device ends in a partial block would be "grown" (a no-op) on every run; xfs has its
    own slack there.
    """
    if not fstype.startswith("ext"):
        return True
    rc, out, err = module.run_command(["dumpe2fs", "-h", device])
    if rc != 0:
        module.fail_json(
            msg=f"dumpe2fs cannot read {device} ({err.strip()}); check the filesystem."
        )
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    block = int(fields["Block size"])
    return disk_bytes(device) - int(fields["Block count"]) * block >= block


if __name__ == "__main__":
    main()
