#!/usr/bin/python
"""Check the node again with preflight's recorded thresholds: Python, OS, disk, time sync."""

from __future__ import annotations

import os
import sys
from typing import Any

from ansible.module_utils.facts.system.distribution import Distribution
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.nodeprep.hardening.plugins.module_utils.probe import TIMED_OUT, probe
from ansible_collections.nodeprep.hardening.plugins.module_utils.status import begin

DOCUMENTATION = r"""
module: preflight_status
short_description: Check a node again with the thresholds the preflight role applied.
description:
  - The read-only counterpart of the preflight role, for nodeprep verify. Judges four
    checks against the thresholds the role recorded in its applied marker and returns them
    under C(checks) for C(nodeprep_check) - C(preflight.python) (the Python running this
    module is at least C(min_python)), C(preflight.os) (the distribution, as Ansible's own
    distribution facts name it, is listed in C(supported_distributions) by major or full
    version), C(preflight.disk) (each of C(disk_paths) has C(min_free_gb) GiB free for an
    unprivileged writer) and C(preflight.time_sync) (one of C(time_sync_services) is active,
    asked of systemd in one C(systemctl is-active) call; skipped when C(time_sync_required)
    was false).
  - Reads only.
options:
  expect:
    description: What to judge against - the role's marker data (C(min_python),
      C(supported_distributions), C(min_free_gb), C(disk_paths), C(time_sync_required),
      C(time_sync_services)). Without it, the module reads the preflight role's marker from
      I(marker_dir).
    type: dict
  timeout_s:
    description: Seconds the C(systemctl) probe may take (verify --timeout).
    type: int
    default: 60
extends_documentation_fragment:
  - nodeprep.hardening.marker
notes:
  - Supports check mode.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Check the node again with the thresholds preflight applied.
  nodeprep.hardening.preflight_status:
    timeout_s: 30
  register: preflight
  check_mode: false
"""

RETURN = r"""
started:
  description: Epoch seconds when the module started, for the I(since) option of nodeprep_check.
  returned: always
  type: float
checks:
  description: One verdict per check, each with C(check), C(passed), C(detail) and C(skip).
  returned: always
  type: list
  elements: dict
ansible_facts:
  description: The distribution facts Ansible's own code read (C(distribution),
    C(distribution_version), C(distribution_major_version), C(os_family), ...), set as the
    host's facts.
  returned: when the module judged the node
  type: dict
"""

NAMES = ["python", "os", "disk", "time_sync"]
GIB = 1 << 30
NOT_REQUIRED = "preflight_time_sync_required was false when this node was provisioned"


def version_tuple(text: str) -> tuple[int, ...]:
    """ "3.8" -> (3, 8); the parts that are not numbers end it."""
    parts = []
    for part in str(text).split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def judge_python(expect: dict[str, Any], running: tuple[int, ...]) -> dict[str, Any]:
    minimum = str(expect.get("min_python", "3.8"))
    shown = ".".join(str(p) for p in running)
    if running >= version_tuple(minimum):
        detail = f"Python {shown} >= {minimum}"
        return {"check": "preflight.python", "passed": True, "detail": detail}
    return {
        "check": "preflight.python",
        "passed": False,
        "detail": f"The node's Python {shown} is older than {minimum}; install python3 "
        f"{minimum} or newer on the node (apt-get install python3) and run again.",
    }


def judge_os(expect: dict[str, Any], facts: dict[str, str]) -> dict[str, Any]:
    name = facts.get("distribution", "?")
    version, major = facts.get("distribution_version", ""), facts.get("distribution_major_version")
    supported = [str(s) for s in expect.get("supported_distributions") or []]
    if f"{name} {major}" in supported or f"{name} {version}" in supported:
        return {"check": "preflight.os", "passed": True, "detail": f"{name} {version} is supported"}
    return {
        "check": "preflight.os",
        "passed": False,
        "detail": f"The operating system {name} {version} is not supported (supported: "
        f"{', '.join(supported)}); run nodeprep on a supported distribution.",
    }


def free_bytes(path: str) -> tuple[int | None, str]:
    """Bytes an unprivileged writer may still use on PATH's filesystem (df's avail)."""
    try:
        stat = os.statvfs(path)
    except OSError as exc:
        return None, exc.strerror or str(exc)
    return stat.f_bavail * stat.f_frsize, ""


def judge_disk(expect: dict[str, Any], free: dict[str, tuple[int | None, str]]) -> dict[str, Any]:
    minimum = int(expect.get("min_free_gb", 0) or 0)
    paths = [str(p) for p in expect.get("disk_paths") or []]
    problems = []
    for path in paths:
        avail, reason = free.get(path, (None, "not checked"))
        if avail is None:
            problems.append(
                f"The path {path} cannot be checked ({reason}); create it or remove it from "
                "preflight_disk_paths."
            )
        elif avail < minimum * GIB:
            problems.append(
                f"The filesystem of {path} has {round(avail / GIB, 1)} GiB free, less than "
                f"preflight_min_free_gb={minimum} GiB; free space there or lower the threshold."
            )
    fine = f"{', '.join(paths)} each have at least {minimum} GiB free"
    return {"check": "preflight.disk", "passed": not problems, "detail": " ".join(problems) or fine}


def unit_names(services: list[str]) -> list[str]:
    return [s if s.endswith(".service") else f"{s}.service" for s in services]


def judge_time_sync(
    expect: dict[str, Any], active: tuple[int, str, str] | None, timeout_s: int
) -> dict[str, Any]:
    check: dict[str, Any] = {"check": "preflight.time_sync", "passed": False, "detail": ""}
    if not boolean(expect.get("time_sync_required", True), strict=False) or active is None:
        return {**check, "skip": NOT_REQUIRED}
    services = [str(s) for s in expect.get("time_sync_services") or []]
    rc, out, err = active
    states = out.split()
    running = [s for s, state in zip(services, states) if state == "active"]
    if running:
        return {**check, "passed": True, "detail": f"{', '.join(running)} is running"}
    if rc == TIMED_OUT:
        said = f"; systemctl timed out after {timeout_s} s"
    elif rc not in (0, 3):  # 3: none of the units is active
        said = f"; systemctl said: {err.strip() or f'exit {rc}'}"
    else:
        said = ""
    return {
        **check,
        "detail": f"No time synchronisation service is running (looked for "
        f"{', '.join(services)}){said}; install and start one (e.g. apt-get install "
        "systemd-timesyncd).",
    }


def main() -> None:
    module, expect, started = begin(
        "preflight", NAMES, {"timeout_s": {"type": "int", "default": 60}}
    )
    timeout_s = int(module.params["timeout_s"])
    facts = Distribution(module=module).get_distribution_facts()
    free = {str(p): free_bytes(str(p)) for p in expect.get("disk_paths") or []}
    active = None
    if boolean(expect.get("time_sync_required", True), strict=False):
        services = unit_names([str(s) for s in expect.get("time_sync_services") or []])
        argv = ["timeout", str(timeout_s), "systemctl", "is-active", "--", *services]
        active = probe(module, argv)
    checks = [
        judge_python(expect, tuple(sys.version_info[:3])),
        judge_os(expect, facts),
        judge_disk(expect, free),
        judge_time_sync(expect, active, timeout_s),
    ]
    # The distribution facts it read (os_family among them) become the host's facts, so the
    # roles after preflight need no setup call of their own to pick a package manager.
    module.exit_json(
        changed=False,
        started=started,
        checks=[{"skip": "", **c} for c in checks],
        ansible_facts=facts,
    )


if __name__ == "__main__":
    main()
