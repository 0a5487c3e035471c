#!/usr/bin/python
"""Probe a directory's filesystem: size, free space, and whether a write survives fsync."""

from __future__ import annotations

import os
import time
import uuid

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: nodeprep_disk
short_description: Measure a directory's filesystem and test a durable write there.
description:
  - Measures the size and free space of the filesystem holding each directory, and
    writes a small file, fsyncs it and its directory, reads it back and
    removes it. Evidence only; the checks decide. Never fails for a missing or full path.
  - Judges the evidence as three checks (C(disk.size), C(disk.free), C(disk.writable)) over
    all directories, returned under C(checks) for C(nodeprep_check) to report.
options:
  paths:
    description: Directories, each a mapping with C(path) and optional C(min_size_gb) and
      C(min_free_gb).
    type: list
    elements: dict
    required: true
"""

_PAYLOAD = b"nodeprep verify write probe\n" * 1024


def probe(path: str, write_test: bool = True) -> dict[str, object]:
    """Evidence about one directory; an error becomes a field, never an exception."""
    found: dict[str, object] = {"path": path, "exists": os.path.isdir(path)}
    if not found["exists"]:
        found["error"] = f"{path} is not a directory"
        return found
    stats = os.statvfs(path)
    found["size_bytes"] = stats.f_blocks * stats.f_frsize
    found["free_bytes"] = stats.f_bavail * stats.f_frsize
    if write_test:
        found.update(durable_write(path))
    return found


def durable_write(path: str) -> dict[str, object]:
    """Write, fsync file and directory, read back; the temporary file is always removed."""
    target = os.path.join(path, f".nodeprep-verify-{uuid.uuid4().hex}")
    started = time.monotonic()
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, _PAYLOAD)
            os.fsync(fd)
        finally:
            os.close(fd)
        dir_fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        with open(target, "rb") as handle:
            same = handle.read() == _PAYLOAD
        if not same:
            return {"writable": False, "write_error": "the file read back differs"}
        return {"writable": True, "fsync_seconds": round(time.monotonic() - started, 4)}
    except OSError as exc:
        return {"writable": False, "write_error": f"{exc.strerror or exc} ({target})"}
    finally:
        if os.path.exists(target):
            os.unlink(target)


_GIB = 1 << 30


def judge(
    items: list[dict[str, object]], found: list[dict[str, object]]
) -> list[dict[str, object]]:
    """disk.size, disk.free and disk.writable over every directory: each fails if any path does."""
    size, free, write = [], [], []
    for item, seen in zip(items, found):  # noqa: B905 - nodes may run Python 3.8
        path = str(item["path"])
        if not seen["exists"]:
            problem = (True, f"{path} does not exist; create it or fix node_checks_disk_paths")
            for rows in (size, free, write):
                rows.append(problem)
            continue
        if item.get("min_size_gb") is not None:
            gib, want = seen["size_bytes"] / _GIB, float(item["min_size_gb"])
            size.append(
                (
                    gib < want,
                    f"{path} is on a {gib:.2f} GiB filesystem, expected >= {want:g} GiB"
                    + ("; grow the volume (role volume_grow)" if gib < want else ""),
                )
            )
        gib, want = seen["free_bytes"] / _GIB, float(item.get("min_free_gb") or 0)
        free.append(
            (
                gib < want,
                f"{path} has {gib:.2f} GiB free, need {want:g} GiB"
                + ("; free space there before a run writes checkpoints" if gib < want else ""),
            )
        )
        if seen.get("writable"):
            write.append((False, f"{path} took a write with fsync in {seen['fsync_seconds']} s"))
        else:
            write.append((True, f"{path} refused a durable write: {seen.get('write_error')}"))
    checks = [
        _verdict("disk.size", size),
        _verdict("disk.free", free),
        _verdict("disk.writable", write),
    ]
    if not size:
        checks[0]["skip"] = "no expected size set; give node_checks_disk_paths items a min_size_gb"
    return checks


def _verdict(name: str, rows: list[tuple[bool, str]]) -> dict[str, object]:
    bad = [text for failed, text in rows if failed]
    good = [text for failed, text in rows if not failed]
    return {"check": name, "passed": not bad, "detail": "; ".join(bad or good), "skip": ""}


def main() -> None:
    started = time.time()
    module = AnsibleModule(
        argument_spec={"paths": {"type": "list", "elements": "dict", "required": True}},
        supports_check_mode=True,
    )
    items = module.params["paths"]
    bad = [item for item in items if not item.get("path")]
    if bad:
        module.fail_json(msg=f"every node_checks_disk_paths item needs a path; got {bad}")
    found = [probe(str(item["path"])) for item in items]
    module.exit_json(changed=False, started=started, disk=found, checks=judge(items, found))


if __name__ == "__main__":
    main()
