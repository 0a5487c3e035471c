"""The nic_bond role on a real kernel: refusal, check mode, converge, failover, rollback.

Each Ansible task costs seconds under TCG, so one node carries a whole story: the steps
build on each other the way an operator would meet them. The story runs under Ansible's own
linear strategy. Under mitogen (`provision --fast`) it failed in clean-clone runs: the
bond's activation, detached with async, lost mitogen's connection ("the respondent Context
has disconnected"), and once the bond had no ports after the bad probe's rollback.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from lab_helpers import LabNode
from nic_bond_helpers import (
    ADDRESS,
    BOND,
    PEER,
    active_member,
    bonding,
    inventory,
    lost_pings,
    members_up,
    ping_during_cut,
    profiles,
    reply_gaps_ms,
    run_role,
    until,
)

pytestmark = [pytest.mark.lab, pytest.mark.timeout(2400)]
MARKER = "/etc/nodeprep/roles/nic_bond.json"


def test_refused_checked_bonded_fails_over_idempotent_verified_bad_probe_rolled_back(
    lab_node: LabNode, tmp_path: Path
) -> None:
    lab_ini = inventory(lab_node, tmp_path)
    before = profiles(lab_node)

    # ens3 carries the SSH session: refused without the opt-in, nothing changed.
    refused = run_role(lab_ini, {"nic_bond_members": ["ens3", "ens4"]})
    assert refused.result.exit_code == 1
    assert "Refusing to bond ens3 into bond0" in refused.messages
    assert "management connection" in refused.messages
    assert profiles(lab_node) == before

    # Check mode reports the change and makes none.
    checked = run_role(lab_ini, check=True)
    assert checked.result.exit_code == 0, checked.messages
    assert checked.changed > 0
    assert profiles(lab_node) == before
    assert "absent" in lab_node.sh(f"test -e {MARKER} && echo present || echo absent")

    converged = run_role(lab_ini)
    assert converged.result.exit_code == 0, converged.messages
    text = bonding(lab_node)
    assert "Bonding Mode: fault-tolerance (active-backup)" in text
    assert "MII Polling Interval (ms): 100" in text
    assert sorted(members_up(text)) == ["ens4", "ens5"]
    assert active_member(lab_node) == "ens4"  # the primary
    assert ADDRESS in lab_node.sh(f"ip -br addr show {BOND}")
    assert "1 received" in lab_node.sh(f"ping -n -c 1 -W 2 -I {BOND} {PEER}")
    assert (
        lab_node.sh(
            "busctl --json=short get-property org.freedesktop.NetworkManager "
            "/org/freedesktop/NetworkManager org.freedesktop.NetworkManager "
            "Checkpoints"
        ).strip()
        == '{"type":"ao","data":[]}'
    )  # committed

    # Failover: cut the active member while pinging every 10 ms through the bond.
    output = ping_during_cut(lab_node, "b0")
    assert until(lambda: active_member(lab_node) == "ens5")
    lost, gaps = lost_pings(output), reply_gaps_ms(output)
    print(f"failover: {lost} pings lost, longest gap {max(gaps):.0f} ms")
    assert re.search(r" [1-9][0-9]* received", output), output
    restored = lab_node.cli("fault", "node1", "link-up", "b0")
    assert restored.returncode == 0, restored.stderr
    assert until(lambda: sorted(members_up(bonding(lab_node))) == ["ens4", "ens5"])

    # After the failover and the link's return: a second converge changes nothing.
    again = run_role(lab_ini)
    assert again.result.exit_code == 0, again.messages
    assert again.changed == 0, f"second converge changed {again.changed} task(s)"
    print(f"converge {converged.seconds:.0f} s, second converge {again.seconds:.0f} s")

    checks = run_role(lab_ini, playbook="verify.yml")
    statuses = {r["check"]: r["status"] for r in checks.result.results}
    assert statuses == dict.fromkeys(
        ["nic_bond.mode", "nic_bond.miimon", "nic_bond.members_up", "nic_bond.active_member",
         "nic_bond.peer"], "pass"), checks.result.results  # fmt: skip
    verify_fails_with_both_links_cut(lab_node, lab_ini)

    # A change whose proof fails (nothing answers at the probe target) is rolled back.
    settled = profiles(lab_node)
    bad = run_role(
        lab_ini,
        {
            "nic_bond_ipv4_address": "10.77.0.16/24",
            "nic_bond_probe_target": "10.77.0.99",
            "nic_bond_probe_timeout": 5,
        },
    )
    assert bad.result.exit_code == 1
    assert "packets transmitted, 0 received" in bad.messages  # ping through the bond failed
    assert "Rolled back: NetworkManager restored the configuration" in bad.messages
    assert "on request" in bad.messages
    assert ADDRESS in lab_node.sh(f"ip -br addr show {BOND}")
    assert "10.77.0.16" not in lab_node.sh(f"nmcli -g ipv4.addresses connection show {BOND}")
    assert profiles(lab_node) == settled
    reaches_peer_again(lab_node)


def test_change_that_cuts_the_node_off_is_rolled_back(lab_node: LabNode, tmp_path: Path) -> None:
    """Bonding the management NIC into an unreachable subnet: NetworkManager undoes it."""
    lab_ini = inventory(lab_node, tmp_path)
    before = profiles(lab_node)
    cut = run_role(lab_ini, {
        "nic_bond_name": "bond9", "nic_bond_members": ["ens3"], "nic_bond_primary": "",
        "nic_bond_ipv4_address": "10.99.0.1/24", "nic_bond_probe_target": "10.99.0.2",
        "nic_bond_allow_disruption": True, "nic_bond_rollback_timeout": 60,
        "nic_bond_reconnect_timeout": 30,
    })  # fmt: skip
    assert cut.result.exit_code == 1, cut.messages
    # Which step notices depends on timing (the reconnect, the job's result, the probe);
    # what matters is who restored the node and what the message says was rolled back.
    assert "on its own when its rollback timeout expired" in cut.messages
    assert "profiles bond9, bond9-port-ens3 are as they were" in cut.messages
    # Reachable as before: same profiles, management address back, no bond left.
    assert profiles(lab_node) == before
    assert "10.0.2.15/24" in lab_node.sh("ip -br addr show ens3")
    assert not re.search(r"\bbond9\b", lab_node.sh("ip -br link"))
    print(f"cut-off run failed and rolled back after {cut.seconds:.0f} s")


def verify_fails_with_both_links_cut(lab_node: LabNode, lab_ini: Path) -> None:
    """Both links cut: the checks that read the live bond fail and say what they saw."""
    for nic in ("b0", "b1"):
        assert lab_node.cli("fault", "node1", "link-down", nic).returncode == 0
    assert until(lambda: members_up(bonding(lab_node)) == [])
    cut = run_role(lab_ini, playbook="verify.yml")
    failed = {r["check"]: r["detail"] for r in cut.result.results if r["status"] == "fail"}
    assert set(failed) == {"nic_bond.members_up", "nic_bond.active_member", "nic_bond.peer"}
    assert "Members with MII status up: none" in failed["nic_bond.members_up"]
    assert f"ping -I {BOND} {PEER}" in failed["nic_bond.peer"], failed
    for nic in ("b0", "b1"):
        assert lab_node.cli("fault", "node1", "link-up", nic).returncode == 0
    assert until(lambda: sorted(members_up(bonding(lab_node))) == ["ens4", "ens5"])


def reaches_peer_again(lab_node: LabNode) -> None:
    """The restored bond carries traffic again; how long that took is printed."""
    started = time.monotonic()
    back = until(
        lambda: "1 received" in lab_node.sh(f"ping -n -c 1 -W 2 -I {BOND} {PEER} || true"), 180
    )
    print(f"bond reaches {PEER} {time.monotonic() - started:.0f} s after the rollback")
    assert back, lab_node.sh(
        f"cat /proc/net/bonding/{BOND}; ip -d link show {BOND}; ip neigh; ip -br addr; "
        f"nmcli -f GENERAL.STATE connection show {BOND}"
    )
