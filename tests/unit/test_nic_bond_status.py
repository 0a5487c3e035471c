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


# The kernel's report of the same bond under ARP monitoring (lab node, Debian 13).
ARP_REPORT = REPORT.replace(
    "MII Polling Interval (ms): 100\n",
    "MII Polling Interval (ms): 0\n",
).replace(
    "Up Delay (ms): 0\n",
    "Up Delay (ms): 0\nARP Polling Interval (ms): 100\nARP Missed Max: 2\n"
    "ARP IP target/s (n.n.n.n form): 10.77.0.2,10.77.0.3\nNS IPv6 target/s (xx::xx form):\n",
)
ARP_EXPECT = {**EXPECT, "miimon": 0, "arp_interval": 100,
              "arp_ip_targets": ["10.77.0.3", "10.77.0.2"], "arp_validate": "all"}  # fmt: skip


def test_arp_monitoring_is_judged_by_interval_targets_and_validation() -> None:
    seen = status.bonding.parse(ARP_REPORT)
    assert seen["arp_interval"] == "100"
    assert seen["arp_targets"] == ["10.77.0.2", "10.77.0.3"]
    good = status.monitor(ARP_EXPECT, {**seen, "arp_validate": "all"})
    assert good["passed"], good
    for wrong in ({"arp_validate": "none"}, {"arp_targets": ["10.77.0.2"]},
                  {"arp_interval": "200"}, {"miimon": "100"}):  # fmt: skip
        bad = status.monitor(ARP_EXPECT, {**seen, "arp_validate": "all", **wrong})
        assert not bad["passed"], wrong
    assert bad["detail"].startswith(
        "The bond's link monitor is ARP every 100 ms to 10.77.0.2 10.77.0.3 (arp_validate all, "
        "MII polling 100 ms), expected ARP every 100 ms to 10.77.0.3 10.77.0.2"
    ), bad["detail"]
    # A marker asking for MII polling fails a bond that runs ARP monitoring, and says so.
    mii = status.monitor(EXPECT, {**seen, "arp_validate": "all"})
    assert not mii["passed"]
    assert "expected MII polling every 100 ms" in mii["detail"]
    assert status.monitor(EXPECT, status.bonding.parse(REPORT))["passed"]


monitor = load("nic_bond_monitor")


def test_monitor_options_parse_as_nmcli_prints_them() -> None:
    text = (
        "mode=active-backup,arp_interval=100,arp_ip_target=10.77.0.2 10.77.0.3,arp_validate=all\n"
    )
    assert monitor.parse_options(text) == {
        "mode": "active-backup", "arp_interval": "100",
        "arp_ip_target": "10.77.0.2 10.77.0.3", "arp_validate": "all",
    }  # fmt: skip


def test_monitor_switches_in_one_modify_removals_first_and_is_idempotent() -> None:
    mii = {"mode": "active-backup", "miimon": "100"}
    arp = monitor.wanted(100, 100, ["10.77.0.2", "10.77.0.3"], "all")
    to_arp = monitor.changes(mii, arp)
    assert to_arp == ["-bond.options", "miimon", "+bond.options", "arp_interval=100",
                      "+bond.options", "arp_ip_target=10.77.0.2\\,10.77.0.3",
                      "+bond.options", "arp_validate=all"]  # fmt: skip
    # What NetworkManager then shows needs nothing more (targets in any order).
    shown = {"mode": "active-backup", "arp_interval": "100",
             "arp_ip_target": "10.77.0.3 10.77.0.2", "arp_validate": "all"}  # fmt: skip
    assert monitor.changes(shown, arp) == []
    back = monitor.changes(shown, monitor.wanted(100, 0, [], "all"))
    assert back == ["-bond.options", "arp_interval", "-bond.options", "arp_ip_target",
                    "-bond.options", "arp_validate", "+bond.options", "miimon=100"]  # fmt: skip
    assert monitor.changes(mii, monitor.wanted(100, 0, [], "all")) == []
    # A profile without miimon (NetworkManager's default) gets it written out once.
    assert monitor.changes({"mode": "active-backup"}, monitor.wanted(100, 0, [], "all")) == [
        "+bond.options", "miimon=100"]  # fmt: skip


def test_monitor_sets_a_new_mode_in_the_same_command_as_the_monitor() -> None:
    """NetworkManager refuses balance-alb with ARP monitoring: going from ARP-monitored
    active-backup to MII-monitored balance-alb must be one modify."""
    shown = {"mode": "active-backup", "arp_interval": "100", "arp_ip_target": "10.77.0.2",
             "arp_validate": "all"}  # fmt: skip
    assert monitor.changes(shown, monitor.wanted(100, 0, [], "all", "balance-alb")) == [
        "-bond.options", "arp_interval", "-bond.options", "arp_ip_target",
        "-bond.options", "arp_validate", "+bond.options", "mode=balance-alb",
        "+bond.options", "miimon=100"]  # fmt: skip
    assert monitor.changes(shown, monitor.wanted(100, 100, ["10.77.0.2"], "all",
                                                 "active-backup")) == []  # fmt: skip
