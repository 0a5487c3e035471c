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
  - Reads only; never changes the node.
options:
  volume_id: {type: str, description: EC2 volume id.}
  device: {type: path, description: The disk (e.g. /dev/nvme1n1).}
  mount: {type: path, description: A mount point on the volume.}
  size_gb: {type: int, description: Wait until the disk is at least this large (GiB).}
  wait_seconds: {type: int, default: 120, description: How long to wait for the size.}
"""

import glob
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

GROWABLE = ("ext2", "ext3", "ext4", "xfs")
GIB = 1024 ** 3


def by_id(module, volume_id):
    suffix = volume_id.replace("-", "")
    links = [p for p in sorted(glob.glob("/dev/disk/by-id/*")) if p.endswith(suffix)]
    if not links:
        module.fail_json(msg="No block device on this node belongs to EBS volume %s (no "
                             "/dev/disk/by-id link ends in %s); attach the volume or set device."
                             % (volume_id, suffix))
    return os.path.realpath(links[0])


def from_mount(module, mount):
    rc, out, err = module.run_command(["findmnt", "--json", "--output", "SOURCE", "--target",
                                       mount])
    if rc != 0:
        module.fail_json(msg="Nothing is mounted at %s (%s); fix the mount or the mount "
                             "point in volume_grow_volumes." % (mount, err.strip()))
    source = json.loads(out)["filesystems"][0]["source"]
    tree = lsblk(module, source)
    parent = tree.get("pkname")
    return "/dev/" + parent if parent else source


def lsblk(module, device):
    rc, out, err = module.run_command(["lsblk", "--json", "--bytes", "--output",
                                       "NAME,PATH,TYPE,FSTYPE,MOUNTPOINT,SIZE,PKNAME", device])
    if rc != 0:
        module.fail_json(msg="%s is not a block device on this node (%s); check the device "
                             "in volume_grow_volumes." % (device, err.strip()))
    return json.loads(out)["blockdevices"][0]


def disk_bytes(device):
    name = os.path.basename(os.path.realpath(device))
    with open("/sys/class/block/%s/size" % name) as handle:
        return int(handle.read()) * 512


def refuse_shrink(module, disk, size_gb):
    """A size of 0 or less, or below the disk's size now, is a mistake: volumes only grow."""
    current = disk_bytes(disk)
    if size_gb < 1 or current > size_gb * GIB:
        module.fail_json(msg="size_gb %d for %s is below its current %.1f GiB; volumes only "
                             "grow, so set size_gb to %d or more, or leave it out."
                             % (size_gb, disk, current / GIB, -(-current // GIB)))


def wait_for_size(module, disk, size_gb):
    deadline = time.monotonic() + module.params["wait_seconds"]
    while disk_bytes(disk) < size_gb * GIB:
        if time.monotonic() > deadline:
            module.fail_json(msg="The kernel still sees %s as %.1f GiB after %d s, less than the "
                                 "%d GiB requested; check that the volume was resized and "
                                 "attached to this node." % (disk, disk_bytes(disk) / GIB,
                                                             module.params["wait_seconds"],
                                                             size_gb))
        time.sleep(1)


def target(module, disk):
    """The partition to grow (the one holding the filesystem) or the whole disk."""
    tree = lsblk(module, disk)
    if tree["type"] != "disk":
        module.fail_json(msg="%s is a %s, not a whole disk; name the disk (e.g. /dev/vdb), not "
                             "a partition." % (disk, tree["type"]))
    parts = [c for c in tree.get("children") or [] if c["type"] == "part"]
    if not parts:
        return tree, None, None
    if len(parts) > 1:
        module.fail_json(msg="%s has %d partitions; nodeprep grows only disks with one "
                             "partition, so grow this one by hand." % (disk, len(parts)))
    part = parts[0]
    with open("/sys/class/block/%s/partition" % part["name"]) as handle:
        number = int(handle.read())
    return part, part["path"], number


def main():
    module = AnsibleModule(
        argument_spec=dict(volume_id=dict(type="str"), device=dict(type="path"),
                           mount=dict(type="path"), size_gb=dict(type="int"),
                           wait_seconds=dict(type="int", default=120)),
        required_one_of=[["volume_id", "device", "mount"]],
        supports_check_mode=True,
    )
    p = module.params
    disk = by_id(module, p["volume_id"]) if p["volume_id"] else None
    named = os.path.realpath(p["device"]) if p["device"] else None
    if disk and named and disk != named:
        module.fail_json(msg="EBS volume %s is %s on this node, not %s; refusing to touch a "
                             "device that is not the volume's." % (p["volume_id"], disk, named))
    disk = disk or named or from_mount(module, p["mount"])
    if p["size_gb"] is not None:
        refuse_shrink(module, disk, p["size_gb"])
        wait_for_size(module, disk, p["size_gb"])
    node, partition, number = target(module, disk)
    fstype = node.get("fstype")
    if fstype == "LVM2_member":
        module.fail_json(msg="%s holds an LVM physical volume; nodeprep does not grow LVM yet, "
                             "so run pvresize and lvextend by hand." % (partition or disk))
    if fstype not in GROWABLE:
        module.fail_json(msg="%s has filesystem %s, which nodeprep does not grow (it grows %s); "
                             "left untouched." % (partition or disk, fstype or "none/unknown",
                                                  ", ".join(GROWABLE)))
    module.exit_json(changed=False, disk=disk, partition=partition, partition_number=number,
                     filesystem_device=partition or disk, fstype=fstype,
                     mountpoint=node.get("mountpoint"), disk_bytes=disk_bytes(disk),
                     fs_growable=fs_growable(module, partition or disk, fstype))


def fs_growable(module, device, fstype):
    """Whether the filesystem can gain at least one block from its device.

    community.general.filesystem compares sizes to the byte, so an ext filesystem whose
    device ends in a partial block would be "grown" (a no-op) on every run; xfs has its
    own slack there.
    """
    if not fstype.startswith("ext"):
        return True
    rc, out, err = module.run_command(["dumpe2fs", "-h", device])
    if rc != 0:
        module.fail_json(msg="dumpe2fs cannot read %s (%s); check the filesystem." % (
            device, err.strip()))
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    block = int(fields["Block size"])
    return disk_bytes(device) - int(fields["Block count"]) * block >= block


if __name__ == "__main__":
    main()
