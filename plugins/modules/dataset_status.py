#!/usr/bin/python
"""Judge each staged data set against its manifest for nodeprep verify (dataset.<name>)."""

from __future__ import annotations

from typing import Any

from ansible_collections.nodeprep.hardening.plugins.module_utils.data.manifest import (
    ManifestError,
    check,
    read_manifest,
)
from ansible_collections.nodeprep.hardening.plugins.module_utils.data.staging import human
from ansible_collections.nodeprep.hardening.plugins.module_utils.status import begin

DOCUMENTATION = r"""
module: dataset_status
short_description: Judge each data set the dataset role staged against its manifest.
description:
  - For every data set recorded in the dataset role's marker, reads C(dest/dataset-manifest.json)
    and compares the directory with it. One check per data set, C(dataset.<name>).
  - The cheap mode (default) compares names and sizes and the manifest's version with the one
    provision recorded, which catches a missing, truncated, extra or replaced file in one
    directory walk; I(full) also re-hashes every file, which catches bit rot and same-size edits.
  - A data set fails on a missing, unreadable or edited manifest, a version other than the one
    recorded, or any file that differs; the detail names the files (the first five).
options:
  full:
    description: Re-hash every file (reads the whole data set).
    type: bool
    default: false
extends_documentation_fragment:
  - nodeprep.hardening.marker
notes:
  - Supports check mode.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Re-hash every staged data set.
  nodeprep.hardening.dataset_status:
    full: true
  register: staged
  check_mode: false
"""

RETURN = r"""
started:
  description: Epoch seconds when the module started, for the I(since) option of nodeprep_check.
  returned: always
  type: float
checks:
  description: One verdict per data set, C(dataset.<name>), with C(check), C(passed), C(detail)
    and C(skip).
  returned: always
  type: list
  elements: dict
"""

SHOWN = 5


def judge(recorded: dict[str, Any], full: bool) -> dict[str, Any]:
    """dataset.<name>: the directory against its manifest, the manifest against the marker."""
    name, dest = recorded.get("name", "?"), recorded.get("dest", "?")
    verdict: dict[str, Any] = {"check": f"dataset.{name}", "passed": False, "skip": ""}
    try:
        manifest = read_manifest(dest)
        problems = check(dest, manifest, full)
    except (ManifestError, OSError) as exc:
        verdict["detail"] = f"{exc}; run `nodeprep provision --tags dataset` to stage it again"
        return verdict
    if manifest.version != recorded.get("version"):
        verdict["detail"] = (
            f"{dest}: the manifest says version {manifest.version[:16]}, provision staged "
            f"{str(recorded.get('version'))[:16]}; stage it again"
        )
        return verdict
    how = "re-hashed" if full else "sizes checked"
    if problems:
        shown = "; ".join(str(p) for p in problems[:SHOWN])
        more = f" and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
        verdict["detail"] = f"{dest} differs from its manifest ({how}): {shown}{more}"
        return verdict
    verdict.update(
        passed=True,
        detail=f"{dest}: {len(manifest.files)} files, {human(manifest.total_bytes)}, "
        f"version {manifest.version[:16]} ({how})",
    )
    return verdict


def main() -> None:
    module, expect, started = begin(
        "dataset", ["staged"], {"full": {"type": "bool", "default": False}}
    )
    datasets = expect.get("datasets") or []
    checks = [judge(item, module.params["full"]) for item in datasets if isinstance(item, dict)]
    if not checks:
        checks = [
            {"check": "dataset.staged", "passed": False, "detail": "", "skip": "no data set staged"}
        ]
    module.exit_json(changed=False, started=started, checks=checks)


if __name__ == "__main__":
    main()
