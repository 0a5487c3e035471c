"""The Linux bonding driver's own report, ``/proc/net/bonding/<bond>``, read one way.

Used by the nic_bond role's plan (before a change), by its verify checks (after) and by
the drills that fail a bond over (drill.bonds), so that all of them agree on what the
kernel says. Standard library and Python 3.8 only (module_utils).
"""

from __future__ import annotations

import re
from typing import Any

# How /proc/net/bonding names each mode nmcli takes.
MODE_TEXT = {
    "balance-rr": "load balancing (round-robin)",
    "active-backup": "fault-tolerance (active-backup)",
    "balance-xor": "load balancing (xor)",
    "broadcast": "fault-tolerance (broadcast)",
    "802.3ad": "IEEE 802.3ad Dynamic link aggregation",
    "balance-tlb": "transmit load balancing",
    "balance-alb": "adaptive load balancing",
}


def _field(text: str, name: str) -> str | None:
    match = re.search(rf"^{re.escape(name)}: (.*)$", text, re.MULTILINE)
    return match.group(1).strip() if match else None


def parse(text: str) -> dict[str, Any]:
    """Mode, MII and ARP polling intervals, ARP targets, active member and each member's
    MII status (under ARP monitoring too: the kernel's word for a member's link state).

    ``{"exists": False, ...}`` for an empty text (no such bond). ``members`` keeps the
    kernel's order; ``up`` lists the members whose own MII status is up.
    """
    if not text.strip():
        return {"exists": False, "mode": None, "miimon": None, "arp_interval": None,
                "arp_targets": [], "arp_validate": None, "active": None, "members": [],
                "up": []}  # fmt: skip
    members: list[str] = []
    up: list[str] = []
    # Everything after a "Slave Interface:" line up to the next one belongs to that member.
    for block in re.split(r"^(?=Slave Interface: )", text, flags=re.MULTILINE)[1:]:
        name = _field(block, "Slave Interface")
        if not name:
            continue
        members.append(name)
        if _field(block, "MII Status") == "up":
            up.append(name)
    return {
        "exists": True,
        "mode": _field(text, "Bonding Mode"),
        "miimon": _field(text, "MII Polling Interval (ms)"),
        "arp_interval": _field(text, "ARP Polling Interval (ms)") or "0",
        "arp_targets": (_field(text, "ARP IP target/s (n.n.n.n form)") or "")
        .replace(",", " ")
        .split(),
        "arp_validate": None,  # not in the report; read() takes it from sysfs
        "active": _field(text, "Currently Active Slave"),
        "members": members,
        "up": up,
    }


def read(bond: str) -> dict[str, Any]:
    """The live report of BOND (``exists`` False when the kernel has no such bond)."""
    try:
        with open(f"/proc/net/bonding/{bond}", encoding="utf-8") as handle:
            found = parse(handle.read())
    except OSError:
        return parse("")
    try:  # "all 3": the name, then the number
        with open(f"/sys/class/net/{bond}/bonding/arp_validate", encoding="utf-8") as handle:
            words = handle.read().split()
            found["arp_validate"] = words[0] if words else None
    except OSError:
        pass
    return found
