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
      - At least one of I(volume_id), I(gce_disk), I(device) and I(mount) is required.
    type: str
  gce_disk:
    description:
      - A GCE persistent disk's name. The disk is the target of
        C(/dev/disk/by-id/google-NAME), which carries the device name it was attached
        under (the disk's name unless another was given).
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


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.nodeprep.hardening.plugins.module_utils import volume_grow as vg

# os-release ID / ID_LIKE words -> the package that ships growpart there.
GROWPART_PACKAGES = (
    (("rhel", "fedora", "centos"), "cloud-utils-growpart"),
    (("suse", "opensuse"), "growpart"),
)
DEFAULT_GROWPART_PACKAGE = "cloud-guest-utils"


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            volume_id=dict(type="str"),
            gce_disk=dict(type="str"),
            device=dict(type="path"),
            mount=dict(type="path"),
            size_gb=dict(type="int"),
            wait_seconds=dict(type="int", default=120),
        ),
        required_one_of=[["volume_id", "gce_disk", "device", "mount"]],
        mutually_exclusive=[["volume_id", "gce_disk"]],
        supports_check_mode=True,
    )
    p = module.params
    run = module.run_command
    try:
        disk = vg.resolve_disk(run, p["volume_id"], p["device"], p["mount"], p["gce_disk"])
        if p["size_gb"] is not None:
            vg.refuse_shrink(disk, p["size_gb"])
            vg.wait_for_size(disk, p["size_gb"], p["wait_seconds"])
        node, partition, number = vg.target(run, disk)
        fstype = vg.check_fstype(node.get("fstype"), partition or disk)
        growable = vg.fs_growable(run, partition or disk, fstype)
    except vg.GrowError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(
        changed=False,
        disk=disk,
        partition=partition,
        partition_number=number,
        filesystem_device=partition or disk,
        fstype=fstype,
        mountpoint=node.get("mountpoint"),
        disk_bytes=vg.disk_bytes(disk),
        fs_growable=growable,
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


if __name__ == "__main__":
    main()
