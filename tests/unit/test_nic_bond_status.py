"""The nic_bond verify checks' decisions, from a real /proc/net/bonding report."""

from __future__ import annotations

from typing import Any

from collection_plugins import load

status = load("nic_bond_status")
REPORT = """Ethernet Channel Bonding Driver: v6.12.117+deb13-amd64

Bonding Mode: fault-tolerance (active-backup)
Primary Slave: ens4 (primary_reselect always)
Currently Active Slave: ens4
MII Status: up
MII Polling Interval (ms): 100
Up Delay (ms): 0

Slave Interface: ens4
MII Status: up
Speed: Unknown
Link Failure Count: 0
Permanent HW addr: 52:54:00:12:34:57

Slave Interface: ens5
MII Status: up
Link Failure Count: 1
Permanent HW addr: 52:54:00:12:34:58
"""
EXPECT: dict[str, Any] = {
    "bond": "bond0",
    "mode": "active-backup",
    "miimon": 100,
    "members": ["ens4", "ens5"],
    "primary": "ens4",
    "probe_target": "10.77.0.2",
}
PING = (0, "3 packets transmitted, 3 received, 0% packet loss, time 1002ms")


def verdicts(report: str, expect: dict[str, Any] = EXPECT, ping: Any = PING) -> Any:
    seen = status.bonding.parse(report)
    return {c["check"]: c for c in status.judge(expect, seen, ping)}


def test_a_healthy_bond_passes_every_check() -> None:
    found = verdicts(REPORT)
    assert {k: c["passed"] for k, c in found.items()} == dict.fromkeys(found, True)
    assert found["nic_bond.peer"]["detail"].startswith("ping -I bond0 10.77.0.2: 3 packets")


def test_a_member_whose_link_is_down_fails_members_up_and_names_the_rest() -> None:
    down = REPORT.replace(
        "Slave Interface: ens5\nMII Status: up", "Slave Interface: ens5\nMII Status: down"
    )
    found = verdicts(down)
    assert not found["nic_bond.members_up"]["passed"]
    assert found["nic_bond.members_up"]["detail"].startswith(
        "Members with MII status up: ens4; expected ens4, ens5"
    )
    # The bond's own "MII Status: up" line (before the members) counts for no member.
    assert status.bonding.parse(down)["up"] == ["ens4"]


def test_the_active_member_must_be_the_primary_while_its_link_is_up() -> None:
    backup = REPORT.replace("Currently Active Slave: ens4", "Currently Active Slave: ens5")
    assert not verdicts(backup)["nic_bond.active_member"]["passed"]
    primary_down = backup.replace(
        "Slave Interface: ens4\nMII Status: up", "Slave Interface: ens4\nMII Status: down"
    )
    assert verdicts(primary_down)["nic_bond.active_member"]["passed"]


def test_no_bond_wrong_mode_miimon_and_a_silent_peer_fail() -> None:
    found = verdicts("", ping=(1, "3 packets transmitted, 0 received, 100% packet loss"))
    assert not any(c["passed"] for c in found.values())
    assert "runs in mode 'no bond in /proc/net/bonding'" in found["nic_bond.mode"]["detail"]
    other = verdicts(REPORT, {**EXPECT, "mode": "802.3ad", "miimon": 200})
    assert not other["nic_bond.mode"]["passed"]
    assert not other["nic_bond.miimon"]["passed"]
    assert other["nic_bond.active_member"]["skip"] == "only active-backup has one active member"


def test_ping_summary_falls_back_to_what_ping_said() -> None:
    assert (
        status.ping_summary(2, "", "ping: bond0: No such device\n") == "ping: bond0: No such device"
    )
    assert status.ping_summary(1, "", "") == "ping exited 1"
