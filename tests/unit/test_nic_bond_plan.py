"""The nic_bond plan module's reading of the kernel and its lifeline rule, without a node."""

from __future__ import annotations

from types import ModuleType

import pytest

from collection_plugins import load

PROC_BOND = """Ethernet Channel Bonding Driver: v6.12.117+deb13-amd64

Bonding Mode: fault-tolerance (active-backup)
Primary Slave: ens4 (primary_reselect always)
Currently Active Slave: ens5
MII Status: up
MII Polling Interval (ms): 100

Slave Interface: ens4
MII Status: down
Link Failure Count: 1

Slave Interface: ens5
MII Status: up
Link Failure Count: 0
"""


@pytest.fixture
def plan() -> ModuleType:
    return load("nic_bond_plan")


def test_live_bond_reads_mode_members_and_active(
    plan: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan, "read", lambda path: PROC_BOND if path.endswith("/bond0") else "")
    assert plan.live_bond("bond0") == {
        "exists": True,
        "mode": "fault-tolerance (active-backup)",
        "miimon": "100",
        "arp_interval": "0",  # no "ARP Polling Interval" line: MII monitoring
        "arp_targets": [],
        "arp_validate": None,
        "members": ["ens4", "ens5"],
        "up": ["ens5"],
        "active": "ens5",
    }
    assert plan.live_bond("bond1")["exists"] is False
    assert plan.live_bond("bond1")["members"] == []


def test_member_carries_the_lifeline_directly_or_through_its_bond(
    plan: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    masters = {"ens3": None, "ens4": "bond0", "ens5": None}
    monkeypatch.setattr(plan, "master", masters.get)
    assert plan.lifeline_reasons("ens3", "ens3", "10.0.2.2", []) == [
        "the management connection (SSH from 10.0.2.2 arrives on ens3)"
    ]
    assert plan.lifeline_reasons("ens4", "bond0", "10.0.2.2", ["bond0"]) == [
        "the management connection (SSH from 10.0.2.2 arrives on bond0)",
        "the default route (via bond0)",
    ]
    assert plan.lifeline_reasons("ens5", "ens3", "10.0.2.2", ["ens3"]) == []
