"""The nic_bond role on a real kernel: a change that cuts the node off is rolled back.

The rest of the bond's story (refusal of the management NIC, check mode, converge, failover,
idempotence, the checks with both links cut, a bad probe rolled back) runs on the quick
start's node, after its provision: tests/lab/test_quickstart.py. The role runs under
Ansible's own linear strategy, here and wherever a bond is activated (`provision --fast`
runs the rollout play linear too when a selected node has a bond): under mitogen the bond's
activation, detached with async, and the reconnect after it lost mitogen's connection ("the
respondent Context has disconnected"), and once the bond had no ports after a bad probe's
rollback.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lab_helpers import LabNode
from nic_bond_helpers import inventory, profiles, run_role

pytestmark = [pytest.mark.lab, pytest.mark.timeout(2400)]


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
