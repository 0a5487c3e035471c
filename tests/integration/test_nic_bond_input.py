"""nic_bond refuses bad input and lifeline members before it changes anything.

Runs the role through nodeprep's runner against this machine over the local connection:
every case here stops in validation (on the controller, except one read-only step that
resolves the members on the node) or in the read-only plan step, so nothing on this machine is
touched, and there is no NetworkManager here to touch anyway.
A NIC the node lacks is named before the addresses are judged: it is the first thing to fix.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nodeprep import runner

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
PLAY = Path(__file__).parent / "nic_bond" / "play.yml"
# Loopback: a member every machine has, so the address cases get past the plan step.
GOOD: dict[str, Any] = {
    "nic_bond_members": ["lo"],
    "nic_bond_ipv4_address": "10.77.0.15/24",
    "nic_bond_probe_target": "10.77.0.2",
}


def run(inventory: Path, **overrides: Any) -> tuple[int, str, list[str]]:
    request = runner.RunRequest(PLAY, inventory, extra_vars={**GOOD, **overrides})
    result = runner.run(request)
    tasks = [failure.task for failure in result.failures]
    return result.exit_code, "\n".join(f.message for f in result.failures), tasks


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"nic_bond_mode": "active-passive"}, "nic_bond_mode"),
        ({"nic_bond_name": "bond/0"}, "nic_bond_name 'bond/0' is not a valid interface name"),
        ({"nic_bond_members": ["lo", "lo"]}, "each once"),
        ({"nic_bond_members": ["52:54:00:zz:00:01"]}, "or a MAC address"),
        ({"nic_bond_primary": "ens9"}, "Check nic_bond_primary 'ens9'"),
        ({"nic_bond_ipv4_address": "10.77.0.300/24"}, "nic_bond_ipv4_address '10.77.0.300/24'"),
        ({"nic_bond_ipv4_address": "10.77.0.15"}, "address with prefix"),
        ({"nic_bond_ipv6_method": "static", "nic_bond_ipv6_address": "fd00::1"}, "fd00:77::15/64"),
        ({"nic_bond_probe_target": "", "nic_bond_ipv4_gateway": ""}, "nic_bond_probe_target"),
        ({"nic_bond_rollback_timeout": 30, "nic_bond_reconnect_timeout": 60}, "must exceed"),
        (
            {"nic_bond_arp_interval": 100, "nic_bond_arp_ip_targets": ["10.77.0.2", "fd00::2"]},
            "nic_bond_arp_ip_targets ['10.77.0.2', 'fd00::2'] (1-16 IPv4 addresses",
        ),
        (
            {"nic_bond_arp_interval": 100, "nic_bond_mode": "802.3ad"},
            "Check nic_bond_arp_interval 100 (0 for MII monitoring",
        ),
    ],
)
def test_bad_input_is_refused_before_the_node_is_touched(
    local_inventory: Path, overrides: dict[str, Any], expected: str
) -> None:
    code, messages, tasks = run(local_inventory, **overrides)
    assert code == 1
    assert expected in messages
    # Refused in validation: the read-only member check at most, never the plan or later.
    assert len(tasks) == 1, tasks
    assert tasks[0].startswith(("Check ", "Validating arguments")), tasks


def _default_route_nic() -> tuple[str, str]:
    routes = json.loads(subprocess.run(
        ["ip", "-j", "route", "show", "default"], capture_output=True, text=True, check=True
    ).stdout)  # fmt: skip
    if not routes:
        pytest.skip("this machine has no default route to protect")
    nic = str(routes[0]["dev"])
    return nic, Path(f"/sys/class/net/{nic}/address").read_text().strip()


def test_default_route_member_is_refused_by_name_and_by_mac(local_inventory: Path) -> None:
    nic, mac = _default_route_nic()
    for member in (nic, mac):
        code, messages, _ = run(local_inventory, nic_bond_members=[member])
        assert code == 1
        assert f"Refusing to bond {nic} into bond0" in messages
        assert f"the default route (via {nic})" in messages
        assert "nic_bond_allow_disruption: true" in messages


def test_unknown_members_are_named_before_the_address(local_inventory: Path) -> None:
    code, messages, _ = run(
        local_inventory,
        nic_bond_members=["nosuchnic0", "lo", "52:54:00:00:00:99"],
        nic_bond_ipv4_address="",
    )
    assert code == 1
    assert (
        "nic_bond_members names nosuchnic0, 52:54:00:00:00:99, which this node does not have"
        in messages
    )
    assert "nic_bond_ipv4_address" not in messages
