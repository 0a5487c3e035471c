#!/usr/bin/python
"""Probe a directory's filesystem: size, free space, and whether a write survives fsync."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

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
    description:
      - Directories to probe, each a mapping with C(path) (required), and optionally
        C(min_size_gb) (the filesystem must be at least this big, in GiB) and
        C(min_free_gb) (at least this much must be free, in GiB; 0 when left out).
      - C(disk.size) is skipped when no item sets C(min_size_gb).
    type: list
    elements: dict
    required: true
notes:
  - Supports check mode. The write probe still runs then; its file is always removed.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Measure each directory's filesystem and write there with fsync.
  nodeprep.hardening.nodeprep_disk:
    paths:
      - {path: /data, min_size_gb: 500, min_free_gb: 100}
      - {path: /scratch, min_free_gb: 20}
  register: disk
  check_mode: false

- name: Report disk.size, disk.free and disk.writable.
  nodeprep.hardening.nodeprep_check:
    check: "{{ item.check }}"
    passed: "{{ item.passed }}"
    since: "{{ disk.started }}"
    skip: "{{ item.skip or omit }}"
    detail: "{{ item.detail or item.skip }}"
  loop: "{{ disk.checks }}"
"""

RETURN = r"""
started:
  description: Epoch seconds when the module started, for the I(since) option of nodeprep_check.
  returned: always
  type: float
  sample: 1718000000.123
disk:
  description: The evidence for each item of I(paths), in the same order.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The directory probed.
      type: str
    exists:
      description: Whether the path is a directory.
      type: bool
    error:
      description: Why nothing was measured. Only when the path is not a directory.
      type: str
    size_bytes:
      description: Size of the filesystem holding the directory. Only when it exists.
      type: int
    free_bytes:
      description: Bytes available to unprivileged users there. Only when it exists.
      type: int
    writable:
      description: Whether the durable write and read-back succeeded. Only when it exists.
      type: bool
    fsync_seconds:
      description: Seconds the write, both fsyncs and the read-back took. Only when writable.
      type: float
    write_error:
      description: Why the durable write failed. Only when not writable.
      type: str
  sample:
    - path: /data
      exists: true
      size_bytes: 536870912000
      free_bytes: 322122547200
      writable: true
      fsync_seconds: 0.0042
checks:
  description:
    - The verdicts of C(disk.size), C(disk.free) and C(disk.writable), in that order. Each
      check fails when any directory fails it.
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: The check name.
      type: str
    passed:
      description: Whether every directory meets the expectation.
      type: bool
    detail:
      description: The failing directories in words, or all of them when none fails.
      type: str
    skip:
      description: Why the check does not apply, or an empty string.
      type: str
  sample:
    - check: disk.size
      passed: true
      detail: /data is on a 500.00 GiB filesystem, expected >= 500 GiB
      skip: ""
    - check: disk.free
      passed: true
      detail: /data has 300.00 GiB free, need 100 GiB
      skip: ""
    - check: disk.writable
      passed: true
      detail: /data took a write with fsync in 0.0042 s
      skip: ""
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


def judge(items: list[dict[str, Any]], found: list[dict[str, Any]]) -> list[dict[str, object]]:
    """disk.size, disk.free and disk.writable over every directory: each fails if any path does."""
    size: list[tuple[bool, str]] = []
    free: list[tuple[bool, str]] = []
    write: list[tuple[bool, str]] = []
    for item, seen in zip(items, found):
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
