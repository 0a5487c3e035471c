#!/usr/bin/python
"""Judge each grown volume's filesystem size for nodeprep verify (volume_grow.size)."""

from __future__ import annotations

from typing import Any

from ansible_collections.nodeprep.hardening.plugins.module_utils.probe import probe
from ansible_collections.nodeprep.hardening.plugins.module_utils.status import begin

DOCUMENTATION = r"""
module: volume_grow_status
short_description: Judge the size of each volume the volume_grow role grew.
description:
  - Reads the size of each grown filesystem from the kernel (C(df) on its mount point, or on
    its device where the marker names no mount) and judges it against the size the volume
    was grown to, as recorded in the role's applied marker.
  - A filesystem smaller than 90 % of its volume's size (the filesystem's own overhead stays
    well under that) fails, and so does one that cannot be read; the detail names each.
  - Returns the verdict C(volume_grow.size) under C(checks) for C(nodeprep_check). Reads only.
options:
  expect:
    description: What to judge against - the role's marker data, whose C(volumes) each have
      C(mount) or C(filesystem_device), and C(size_gb) (null when the role only filled a
      disk the hypervisor had grown). Without it, the module reads the volume_grow role's
      marker from I(marker_dir).
    type: dict
extends_documentation_fragment:
  - nodeprep.hardening.marker
notes:
  - Supports check mode.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Judge every grown filesystem against the size its volume was grown to.
  nodeprep.hardening.volume_grow_status:
  register: volumes
  check_mode: false
"""

RETURN = r"""
started:
  description: Epoch seconds when the module started, for the I(since) option of nodeprep_check.
  returned: always
  type: float
checks:
  description: The verdict of C(volume_grow.size), a list of one, with C(check), C(passed),
    C(detail) and C(skip) (C(the marker lists no volume), or empty).
  returned: always
  type: list
  elements: dict
"""

GIB = 1024**3
# A grown filesystem below this share of its volume's size was not grown.
SHORT = 0.9


def row(volume: dict[str, Any], size_bytes: int | None, error: str) -> dict[str, Any]:
    """One volume's line of the detail, and whether it is short."""
    where = volume.get("mount") or volume.get("filesystem_device") or "?"
    if size_bytes is None:
        return {"short": True, "text": f"{where} cannot be read ({error})"}
    gib = size_bytes / GIB
    want = float(volume["size_gb"]) if volume.get("size_gb") is not None else 0.0
    short = want > 0 and gib < want * SHORT
    text = f"{where} is {round(gib, 2)} GiB"
    if want > 0:
        text += f" for a volume grown to {want} GiB"
    if short:
        text += "; run provision again to grow the filesystem"
    return {"short": short, "text": text}


def judge(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """volume_grow.size: fails when any volume is short or unreadable, naming only those."""
    if not rows:
        return {"check": "volume_grow.size", "passed": False, "detail": "",
                "skip": "the marker lists no volume"}  # fmt: skip
    short = [r for r in rows if r["short"]]
    return {
        "check": "volume_grow.size",
        "passed": not short,
        "detail": "; ".join(r["text"] for r in (short or rows)),
        "skip": "",
    }


def main() -> None:
    module, expect, started = begin("volume_grow", ["size"])
    rows = []
    for volume in expect.get("volumes") or []:
        where = volume.get("mount") or volume.get("filesystem_device") or ""
        argv = ["df", "--output=size", "--block-size=1", "--", where]
        rc, out, err = probe(module, argv)
        lines = out.strip().splitlines()
        size = int(lines[-1].strip()) if rc == 0 and lines and lines[-1].strip().isdigit() else None
        rows.append(row(volume, size, err.strip() or f"df exited {rc}"))
    module.exit_json(changed=False, started=started, checks=[judge(rows)])


if __name__ == "__main__":
    main()
