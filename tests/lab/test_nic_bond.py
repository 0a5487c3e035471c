"""The nic_bond role on a real kernel: refusal, check mode, converge, failover, rollback.

Each Ansible task costs seconds under TCG, so one node carries a whole story: the steps
build on each other the way an operator would meet them.
"""

from __future__ import annotations

import os
import re
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

pytestmark = [
    pytest.mark.lab,
    pytest.mark.timeout(3600),
    # Not yet seen passing end to end with the final role on a quiet machine.
    pytest.mark.skipif(
        os.environ.get("NODEPREP_LAB_BOND") != "1",
        reason="opt-in (NODEPREP_LAB_BOND=1): bond converge/failover story, ~10+ min under TCG",
    ),
]
MARKER = "/etc/nodeprep/roles/nic_bond.json"


def test_refused_checked_then_bonded_and_fails_over(lab_node: LabNode, tmp_path: Path) -> None:
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
    print(f"converge {converged.seconds:.0f} s")
