#!/usr/bin/python
"""Judge the bond the nic_bond role built, from the kernel's view and a ping through it."""

from __future__ import annotations

from typing import Any

from ansible_collections.nodeprep.hardening.plugins.module_utils import bonding
from ansible_collections.nodeprep.hardening.plugins.module_utils.probe import probe
from ansible_collections.nodeprep.hardening.plugins.module_utils.status import begin

DOCUMENTATION = r"""
module: nic_bond_status
short_description: Judge a bond against what the nic_bond role recorded, for nodeprep verify.
description:
  - Reads the bond's report from the bonding driver (C(/proc/net/bonding/<bond>)) and pings
    the probe target through the bond, then judges five checks against the role's applied
    marker - C(nic_bond.mode), C(nic_bond.miimon) (the link monitor the marker names, that
    is the MII polling interval, or under ARP monitoring the ARP interval, targets and
    validation with MII polling off), C(nic_bond.members_up) (every member in
    the bond with its own link up), C(nic_bond.active_member) (active-backup only; the
    primary when its link is up, else any member) and C(nic_bond.peer).
  - Returns them under C(checks) for C(nodeprep_check). Reads only; the ping is three
    packets half a second apart.
options:
  expect:
    description: What to judge against - the role's marker data (C(bond), C(mode),
      C(miimon), C(arp_interval), C(arp_ip_targets), C(arp_validate), C(members), C(primary),
      C(probe_target)). Without it, the module reads the
      nic_bond role's marker from I(marker_dir).
    type: dict
extends_documentation_fragment:
  - nodeprep.hardening.marker
notes:
  - Supports check mode.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Judge the bond against its applied marker.
  nodeprep.hardening.nic_bond_status:
  register: bond
  check_mode: false
"""

RETURN = r"""
started:
  description: Epoch seconds when the module started, for the I(since) option of nodeprep_check.
  returned: always
  type: float
seen:
  description: The bonding driver's report as parsed (C(exists), C(mode), C(miimon),
    C(arp_interval), C(arp_targets), C(arp_validate), C(active), C(members), C(up)).
  returned: always
  type: dict
checks:
  description: One verdict per check, each with C(check), C(passed), C(detail) and C(skip).
  returned: always
  type: list
  elements: dict
"""

_AGAIN = "run nodeprep provision --tags nic_bond"


NAMES = ["mode", "miimon", "members_up", "active_member", "peer"]


def judge(
    expect: dict[str, Any], seen: dict[str, Any], ping: tuple[int, str]
) -> list[dict[str, Any]]:
    """The five verdicts from the marker, the kernel's report and the ping (rc, summary)."""
    bond = expect.get("bond", "")
    mode = str(expect.get("mode", "active-backup"))
    seen_mode = seen.get("mode") or ""
    members, up = list(expect.get("members", [])), list(seen.get("up", []))
    primary, active = expect.get("primary") or "", seen.get("active") or ""
    active_ok = active in members and (not primary or primary not in up or active == primary)
    rc, summary = ping
    checks = [
        {
            "check": "nic_bond.mode",
            "passed": seen_mode == bonding.MODE_TEXT.get(mode, mode),
            "detail": f"{bond} runs in mode '{seen_mode or 'no bond in /proc/net/bonding'}', "
            f"expected {mode}; {_AGAIN}.",
        },
        monitor(expect, seen),
        {
            "check": "nic_bond.members_up",
            "passed": bool(members) and not [m for m in members if m not in up],
            "detail": f"Members with MII status up: {', '.join(up) or 'none'}; expected "
            f"{', '.join(members)}; check the cables or switch ports of the missing ones.",
        },
        {
            "check": "nic_bond.active_member",
            "passed": active_ok,
            "detail": f"The active member is '{active or 'none'}' (primary: {primary or 'none'}); "
            "a primary with its link up should be active, otherwise any member with a link.",
            "skip": "" if mode == "active-backup" else "only active-backup has one active member",
        },
        {
            "check": "nic_bond.peer",
            "passed": rc == 0,
            "detail": f"ping -I {bond} {expect.get('probe_target', '')}: {summary}; check the "
            "bond's address and the segment.",
        },
    ]
    return [{"skip": "", **check} for check in checks]


def _monitor_text(miimon: str, arp: str, targets: list[str], validate: str) -> str:
    if arp not in ("", "0"):
        return (f"ARP every {arp} ms to {' '.join(targets) or 'no target'} "
                f"(arp_validate {validate or '?'}, MII polling {miimon or '?'} ms)")  # fmt: skip
    return f"MII polling every {miimon or '?'} ms"


def monitor(expect: dict[str, Any], seen: dict[str, Any]) -> dict[str, Any]:
    """The nic_bond.miimon check: the kernel runs the link monitor the marker names (a
    marker from before ARP monitoring names MII polling only)."""
    miimon = "" if expect.get("miimon") is None else str(expect["miimon"])
    arp = str(expect.get("arp_interval") or 0)
    targets = [str(t) for t in expect.get("arp_ip_targets") or []]
    validate = str(expect.get("arp_validate") or "")
    seen_arp = str(seen.get("arp_interval") or "0")
    seen_targets = [str(t) for t in seen.get("arp_targets") or []]
    if arp != "0":
        passed = (seen_arp == arp and sorted(seen_targets) == sorted(targets)
                  and (seen.get("arp_validate") or "") == validate
                  and (seen.get("miimon") or "") == "0")  # fmt: skip
    else:
        passed = (seen.get("miimon") or "") == miimon and seen_arp == "0"
    have = _monitor_text(seen.get("miimon") or "", seen_arp, seen_targets,
                         seen.get("arp_validate") or "")  # fmt: skip
    want = _monitor_text(miimon if arp == "0" else "0", arp, targets, validate)
    return {"check": "nic_bond.miimon", "passed": passed,
            "detail": f"The bond's link monitor is {have}, expected {want}; {_AGAIN}."}  # fmt: skip


def ping_summary(rc: int, out: str, err: str) -> str:
    """ping's "N packets transmitted, ..." line, or what it said instead."""
    lines = [line for line in out.splitlines() if "transmitted" in line]
    return lines[0].strip() if lines else (err.strip() or f"ping exited {rc}")


def main() -> None:
    module, expect, started = begin("nic_bond", NAMES)
    bond, target = str(expect.get("bond", "")), str(expect.get("probe_target", ""))
    seen = bonding.read(bond)
    argv = ["ping", "-n", "-c", "3", "-i", "0.5", "-W", "2", "-I", bond, target]
    rc, out, err = probe(module, argv)
    checks = judge(expect, seen, (rc, ping_summary(rc, out, err)))
    module.exit_json(changed=False, started=started, seen=seen, checks=checks)


if __name__ == "__main__":
    main()
