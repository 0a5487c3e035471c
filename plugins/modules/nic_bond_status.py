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
    marker - C(nic_bond.mode), C(nic_bond.miimon), C(nic_bond.members_up) (every member in
    the bond with its own link up), C(nic_bond.active_member) (active-backup only; the
    primary when its link is up, else any member) and C(nic_bond.peer).
  - Returns them under C(checks) for C(nodeprep_check). Reads only; the ping is three
    packets half a second apart.
options:
  expect:
    description: What to judge against - the role's marker data (C(bond), C(mode),
      C(miimon), C(members), C(primary), C(probe_target)). Without it, the module reads the
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
    C(active), C(members), C(up)).
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
    miimon = "" if expect.get("miimon") is None else str(expect["miimon"])
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
        {
            "check": "nic_bond.miimon",
            "passed": (seen.get("miimon") or "") == miimon,
            "detail": f"MII polling interval is '{seen.get('miimon') or ''}' ms, expected "
            f"{miimon} ms; {_AGAIN}.",
        },
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
