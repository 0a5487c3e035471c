"""Bond failover loss and checkpoint rollback time on a lab node (real kernel bonding).

Converges the nic_bond role (active-backup, no primary) on a fresh lab node, then cuts the
active member through QMP while the node pings the bond's peer every 10 ms, alternating
members; the loss of a cut is the longest gap between two replies minus the ping interval.
Then bonds the management NIC into an unreachable subnet inside a NetworkManager checkpoint
and times how long NetworkManager's rollback takes to put the management address back
(on the node's clock) and SSH to answer again (from the controller).

    .venv/bin/python benchmarks/failover.py [--quick] [--cuts 10] [--rollback-timeout 10]

Prints each figure, then (last line) one JSON summary. Single runs on a shared 2-core
machine under software emulation: read them as rough.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

from nodeprep import runner
from nodeprep.lab import lifecycle
from nodeprep.lab.faults import set_link
from nodeprep.lab.paths import cache_dir
from nodeprep.lab.ssh import SshTarget, run_ssh
from nodeprep.lab.state import LabState, NodeRecord

ROOT = Path(__file__).resolve().parent.parent
CONVERGE = ROOT / "tests" / "lab" / "nic_bond" / "converge.yml"
QMP_NIC = {"ens4": "b0", "ens5": "b1"}
PEER = "10.77.0.2"
PING_INTERVAL_MS = 10
MIIMON_MS = 100


def sh(target: SshTarget, command: str, timeout_s: float = 60) -> str:
    done = run_ssh(target, command, timeout_s=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"{command!r} failed on the node: {done.stderr.strip()}")
    return done.stdout


def converge(lab_dir: Path) -> None:
    """The role, as the lab test converges it, with no primary so cuts can alternate."""
    request = runner.RunRequest(
        playbook=CONVERGE,
        inventory=lab_dir / "inventory.ini",
        extra_vars={"nic_bond_primary": "", "nic_bond_miimon": MIIMON_MS},
    )
    result = runner.run(request)
    if result.exit_code != 0:
        raise RuntimeError(f"converge failed: {[f.message for f in result.failures]}")


def active_member(target: SshTarget) -> str:
    match = re.search(r"Currently Active Slave: (\S+)", sh(target, "cat /proc/net/bonding/bond0"))
    return match.group(1) if match else ""


def longest_gap_ms(ping_output: str) -> float:
    stamps = [float(s) for s in re.findall(r"^\[(\d+\.\d+)\] \d+ bytes from", ping_output, re.M)]
    gaps = [(b - a) * 1000 for a, b in itertools.pairwise(stamps)]
    return max(gaps, default=float("inf"))


def one_cut(node: NodeRecord, target: SshTarget) -> float:
    """Cut the active member during a 10 ms ping; restore it; return the outage in ms."""
    member = active_member(target)
    sh(target, "rm -f /tmp/cut.txt /tmp/cut.done; sudo setsid -f sh -c 'ping -n -D -i 0.01 -w 6 "
               f"-I bond0 {PEER} > /tmp/cut.txt 2>&1; touch /tmp/cut.done'")  # fmt: skip
    time.sleep(2)
    set_link(node, QMP_NIC[member], up=False)
    deadline = time.monotonic() + 40
    while "done" not in sh(target, "test -e /tmp/cut.done && echo done || true"):
        if time.monotonic() > deadline:
            raise RuntimeError("the ping during the cut never finished")
        time.sleep(0.5)
    set_link(node, QMP_NIC[member], up=True)
    time.sleep(1.5)  # carrier back and the MII monitor sees it before the next cut
    loss = max(0.0, longest_gap_ms(sh(target, "cat /tmp/cut.txt")) - PING_INTERVAL_MS)
    print(f"cut {member}: now active {active_member(target)}, outage {loss:.0f} ms")
    return loss


def rollback_restore_seconds(target: SshTarget, timeout_s: int) -> tuple[float, float]:
    """Bond the management NIC away inside a checkpoint; time until it is reachable again.

    Two figures: on the node's own clock, from CheckpointCreate until the management address
    is back on ens3 (what the rollback timeout promises), and on the controller, from the
    moment it asked for the change until SSH answers again (that adds the SSH round trips
    and the 5 s a probe into the cut network waits before it gives up).
    """
    done = "/run/nodeprep-rollback-done"
    script = (
        f"rm -f {done} && start=$(date +%s.%N) && "
        "busctl call org.freedesktop.NetworkManager /org/freedesktop/NetworkManager "
        f"org.freedesktop.NetworkManager CheckpointCreate aouu 0 {timeout_s} 6 && "
        "nmcli con add type bond con-name bond9 ifname bond9 ipv4.method manual "
        "ipv4.addresses 10.99.0.1/24 ipv6.method disabled && "
        "nmcli con add type ethernet slave-type bond master bond9 con-name bond9-port-ens3 "
        "ifname ens3 && nmcli con up id bond9-port-ens3 && "
        "{ until ip -br addr show ens3 | grep -q 10.0.2.15; do sleep 0.05; done; "
        f'echo "$start $(date +%s.%N)" > {done}; }}'
    )
    started = time.monotonic()
    sh(target, f"sudo setsid -f sh -c '{script}' > /dev/null 2>&1")
    time.sleep(3)
    while run_ssh(target, f"test -s {done}", 5).returncode != 0:
        if time.monotonic() - started > timeout_s + 120:
            raise RuntimeError("the node never came back after the rollback timeout")
        time.sleep(0.5)
    ssh_back = time.monotonic() - started
    begin, end = (float(value) for value in sh(target, f"cat {done}").split())
    node_side = end - begin
    print(
        f"rollback: management address back {node_side:.1f} s after CheckpointCreate on the"
        f" node's clock, SSH answering {ssh_back:.1f} s after the controller asked"
        f" (rollback timeout {timeout_s} s)"
    )
    return node_side, ssh_back


def measure(state: LabState, lab_dir: Path, cuts: int, timeout_s: int) -> dict[str, object]:
    node = state.nodes[0]
    target = SshTarget(node.ssh_port, Path(state.key))
    started = time.monotonic()
    converge(lab_dir)
    print(f"converge: {time.monotonic() - started:.1f} s")
    losses = [one_cut(node, target) for _ in range(cuts)]
    restore, ssh_back = rollback_restore_seconds(target, timeout_s)
    return {
        "miimon_ms": MIIMON_MS,
        "cuts": cuts,
        "loss_ms_p50": round(statistics.median(losses), 1),
        "loss_ms_max": round(max(losses), 1),
        "rollback_restore_s": round(restore, 1),
        "rollback_ssh_back_s": round(ssh_back, 1),
        "rollback_timeout_s": timeout_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 cuts instead of 10")
    parser.add_argument("--cuts", type=int, default=10)
    parser.add_argument("--rollback-timeout", type=int, default=10)
    args = parser.parse_args()
    cuts = 3 if args.quick else args.cuts
    with tempfile.TemporaryDirectory(prefix="nodeprep-failover-") as scratch:
        lab_dir = Path(scratch) / "lab"
        try:
            state = lifecycle.up(lifecycle.UpRequest(nodes=1), lab_dir, cache_dir())
            summary = measure(state, lab_dir, cuts, args.rollback_timeout)
        finally:
            lifecycle.down(lab_dir)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
