"""A small fleet on lab VMs: the rolling provision stops at a failing canary, then rolls;
verify then proves both nodes, and names exactly what was broken on one of them. Repaired,
each node gets a bond on the lab's wired segments, and the two reach each other through
them, also once one of them failed over alone: the network a two-node job uses (its whole
story is tests/lab/test_job_two_nodes.py, outside `make test`, where the nic_bond role makes
both bonds). Here NetworkManager makes
them straight from nmcli: the role's converge is the quick start's story, and a provision
with a bond runs its rollout play under the linear strategy, which on two emulated nodes
took this test from 362 to 510 s in a full run.

Two nodes fit next to the rest of the suite on 2 cores; each is a separate VM with its own
kernel and data disk, so "untouched" is checked on the node itself (its partition table).
"""

from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from lab_helpers import METRICS
from lab_helpers import lab_cli as lab
from lab_helpers import node_sh as sh
from verify_helpers import (
    BROKEN,
    SKIPPED,
    break_node,
    checkpoint_archive,
    failures,
    run_verify,
    ship_checkpoints,
    statuses,
)

from nodeprep.cli import cli
from nodeprep.lab.state import LabState

# Two VMs, three provision runs and two verify runs.
pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]

NODES = ("node1", "node2")
# tmux is on by default (Debian 13's own, for the lab's login user).
PASSED = {"preflight.os", "heartbeat.service", "heartbeat.probes", "volume_grow.size",
          "disk.writable", "checkpoint.newest",
          "tmux.version", "tmux.config", "tmux.linger", "tmux.logout_survival",
          "dataset.sample"}  # fmt: skip


def provision(tmp_path: Path, inventory: Path, *args: str) -> tuple[int, str, dict[str, Any]]:
    out = tmp_path / "summary.json"
    done = CliRunner().invoke(
        cli, ["provision", str(inventory), "--fast", "--json", str(out), *args]
    )
    return done.exit_code, done.output, json.loads(out.read_text())


def test_canary_failure_stops_rollout_then_fleet_rolls_and_verify_names_the_broken(
    fleet: LabState, tmp_path: Path
) -> None:
    inventory = tmp_path / "fleet.ini"
    lab("inventory", "--output", str(inventory))
    for name in NODES:
        lab("fault", name, "disk-grow", "2G")
    table = "sudo sfdisk --dump /dev/vdb"
    before = {name: sh(fleet, name, table) for name in NODES}
    grow = '[{"device": "/dev/vdb"}]'
    broken = '[{"device": "/dev/vdb"}, {"mount": "/nonexistent/nodeprep-test"}]'

    # The canary's volume list has an entry that cannot be resolved: the role stops there.
    code, output, summary = provision(
        tmp_path, inventory, "--canary", "node2", "-e", f"@{_vars(tmp_path, broken)}"
    )
    assert code == 1, output
    assert "rollout stopped at the canary (node2)" in output
    assert "Nothing is mounted at /nonexistent/nodeprep-test" in output
    assert summary["rollout"]["untouched"] == ["node1"]
    assert sh(fleet, "node1", table) == before["node1"]
    assert sh(fleet, "node2", table) == before["node2"]  # it failed before growpart

    code, output, summary = provision(tmp_path, inventory, "-e", f"@{_vars(tmp_path, grow)}")
    assert code == 0, output
    assert summary["rollout"]["batches"] == [["node1"], ["node2"]]
    for name in NODES:
        assert sh(fleet, name, table) != before[name]
        assert int(sh(fleet, name, "df --output=size -B1M /data | tail -1")) > 1900
        assert sh(fleet, name, "systemctl is-active nodeprep-heartbeat").strip() == "active"

    # A second run changing nothing is the quick start's story (every role, one node): here it
    # would cost two more rolling batches under TCG.

    # Verify proves the fleet: every check passes or skips with a reason. Fleet-wide, as
    # provision above, with --fast (verify under the linear strategy runs in the integration
    # tier and in `make demo`).
    archive = checkpoint_archive(tmp_path)
    for name in NODES:
        ship_checkpoints(functools.partial(sh, fleet, name), archive)
    code, output, healthy = run_verify(inventory, tmp_path, "healthy", "--fast")
    assert code == 0, output
    for name in NODES:
        assert failures(healthy, name) == {}
        assert statuses(healthy, "skip", name) == SKIPPED
        assert statuses(healthy, "pass", name) >= PASSED
    assert all(r["detail"] for r in healthy["results"] if r["status"] == "skip")

    # Break node1: verify fails exactly those checks there, names the checkpoint a resume
    # falls back to, and node2 still passes.
    break_node(functools.partial(sh, fleet, "node1"))
    # The metrics check allows max(3 x heartbeat_metrics_interval_s, 30 s) of age (5 s here, so
    # 30 s). Rather than wait that out (half a minute of the lab tier), the stopped daemon's
    # file is dated 60 s back: its mtime is all the check reads (-c: never made up).
    sh(fleet, "node1", f"sudo touch -c -d @$(( $(date +%s) - 60 )) {METRICS}")
    code, output, broken = run_verify(inventory, tmp_path, "broken", "--fast")
    assert code == 1, output
    failed = {name: failures(broken, name) for name in NODES}
    assert set(failed["node1"]) == BROKEN, failed["node1"]
    assert failed["node2"] == {}, (
        failed["node2"],
        sh(fleet, "node2", "date; sudo journalctl -u nodeprep-heartbeat --no-pager | tail -20"),
    )
    assert "a resume falls back to ckpt-0000000008-full (step 8)" in output
    assert "nodeprep-heartbeat.service is inactive" in output

    bond_network_spans_both_nodes(fleet, tmp_path, inventory)


# An active-backup bond over both bond NICs with the node's address on the segment.
BOND_UP = (
    "sudo nmcli -w 30 connection add type bond ifname bond0 con-name bond0 "
    "bond.options mode=active-backup,miimon=100 ipv4.method manual ipv4.addresses {address} "
    "ipv6.method disabled && for nic in ens4 ens5; do sudo nmcli -w 30 connection add "
    "type ethernet ifname $nic con-name bond0-port-$nic master bond0 slave-type bond; done && "
    "sudo nmcli -w 60 connection up bond0 && for nic in ens4 ens5; do "
    "sudo nmcli -w 60 connection up bond0-port-$nic; done"
)


def bond_network_spans_both_nodes(fleet: LabState, tmp_path: Path, inventory: Path) -> None:
    """node1 repaired, then a bond on both nodes: their segments are wired together, so
    each reaches the other through its bond (ping and a TCP connection, which a slirp on the
    segment used to reset), and the segment peer answers the bond's probe on both."""
    sh(fleet, "node1", "sudo rm -f /data/fill /data/fill2 && "
       "sudo systemctl start nodeprep-heartbeat.service")  # fmt: skip
    for name, address in (("node1", "10.77.0.15/24"), ("node2", "10.77.0.16/24")):
        sh(fleet, name, BOND_UP.format(address=address))
    listen = ("setsid -f python3 -c \"import socket; "
              "s = socket.create_server(('10.77.0.15', 29411)); s.settimeout(120); "
              "c, a = s.accept(); c.sendall(a[0].encode())\" >/dev/null 2>&1; sleep 2")  # fmt: skip
    sh(fleet, "node1", listen)
    seen = sh(
        fleet,
        "node2",
        'python3 -c "import socket; '
        "print(socket.create_connection(('10.77.0.15', 29411), 10).recv(64).decode())\"",
    )
    assert seen.strip() == "10.77.0.16", seen
    for name, other in (("node1", "10.77.0.16"), ("node2", "10.77.0.15")):
        sh(fleet, name, f"ping -c 2 -W 5 -I bond0 {other} && ping -c 2 -W 5 -I bond0 10.77.0.2")
    one_node_failing_over_alone_still_reaches_the_other(fleet)


ACTIVE = "sed -n 's/^Currently Active Slave: //p' /proc/net/bonding/bond0"


def one_node_failing_over_alone_still_reaches_the_other(fleet: LabState) -> None:
    """node2's active member down: node2 fails over to its other NIC's segment while node1
    stays on the first. The segment peer joins the two segments, as the two switches of a
    bond's members are joined, so the nodes still reach each other (without it, node2's
    frames reached only node1's backup member, which drops them)."""
    was = {name: sh(fleet, name, ACTIVE).strip() for name in NODES}
    assert was["node1"] == was["node2"] in ("ens4", "ens5"), f"active members before: {was}"
    down = was["node2"]
    other = "ens5" if down == "ens4" else "ens4"
    sh(fleet, "node2", f"sudo ip link set {down} down")
    try:
        sh(fleet, "node2", f"for i in $(seq 50); do [ \"$({ACTIVE})\" = {other} ] && exit 0; "
           "sleep 0.2; done; exit 1")  # fmt: skip
        now = {name: sh(fleet, name, ACTIVE).strip() for name in NODES}
        assert now == {"node1": down, "node2": other}, f"not on different segments: {now}"
        sh(fleet, "node2", "ping -c 3 -W 5 -I bond0 10.77.0.15")
        sh(fleet, "node1", "ping -c 3 -W 5 -I bond0 10.77.0.16")
    finally:
        # As it was: the member up and active again (the bond has no primary to go back to
        # by itself). A failure here must not hide the one that brought us here.
        bonding = "/proc/net/bonding/bond0"
        up = f"grep -A1 'Slave Interface: {down}' {bonding} | grep -q 'MII Status: up'"
        with contextlib.suppress(AssertionError):
            sh(fleet, "node2", f"sudo ip link set {down} up; for i in $(seq 50); do {up} && "
               "break; sleep 0.2; done; "
               f"sudo ip link set bond0 type bond active_slave {down}")  # fmt: skip
    assert sh(fleet, "node2", ACTIVE).strip() == down


def _vars(tmp_path: Path, volumes: str) -> Path:
    """Per-run variables: the canary's (node2) list may differ from everyone else's."""
    path = tmp_path / "vars.yml"
    path.write_text(
        "volume_grow_volumes: \"{{ canary_volumes if inventory_hostname == 'node2' "
        f"else [{{'device': '/dev/vdb'}}] }}}}\"\ncanary_volumes: {volumes}\n"
        # The bond is the quick start's story; here it would double the rollout's time.
        "nic_bond_members: []\n"
        # A real probe that passes in the guest (sshd) next to the GPU probe, which skips.
        "heartbeat_probes:\n"
        "  - {name: gpu, type: gpu, interval: 10, timeout: 5}\n"
        "  - {name: ssh, type: tcp, host: 127.0.0.1, port: 22, interval: 2, timeout: 2}\n"
    )
    return path
