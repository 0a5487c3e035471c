"""Running the nic_bond role on a lab node and reading the bond back from the guest's kernel."""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab_helpers import LabNode

from nodeprep import runner

PLAYBOOKS = Path(__file__).parent / "nic_bond"
BOND = "bond0"
ADDRESS = "10.77.0.15/24"
PEER = "10.77.0.2"


@dataclass(frozen=True)
class RoleRun:
    result: runner.RunResult
    seconds: float

    @property
    def changed(self) -> int:
        return sum(host.changed for host in self.result.recap.values())

    @property
    def messages(self) -> str:
        return "\n".join(failure.message for failure in self.result.failures)


def inventory(node: LabNode, tmp_path: Path) -> Path:
    done = node.cli("inventory", "--output", str(tmp_path / "lab.ini"))
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


def run_role(
    inventory_path: Path,
    extra: dict[str, Any] | None = None,
    playbook: str = "converge.yml",
    check: bool = False,
    fast: bool = False,
) -> RoleRun:
    """One real ansible-runner run of a playbook in tests/lab/nic_bond on the lab node
    (with ``fast``, under the mitogen strategy, as `provision --fast` runs it)."""
    request = runner.RunRequest(
        playbook=PLAYBOOKS / playbook, inventory=inventory_path, check=check,
        extra_vars=extra or {}, fast=fast,
    )  # fmt: skip
    started = time.monotonic()
    result = runner.run(request)
    return RoleRun(result, time.monotonic() - started)


def profiles(node: LabNode) -> str:
    """NetworkManager's profiles and the devices they are active on, sorted."""
    return "\n".join(sorted(node.sh("nmcli -t -f NAME,TYPE,DEVICE connection show").split("\n")))


def bonding(node: LabNode) -> str:
    return node.sh(f"cat /proc/net/bonding/{BOND}")


def active_member(node: LabNode) -> str:
    match = re.search(r"Currently Active Slave: (\S+)", bonding(node))
    return match.group(1) if match else ""


def members_up(text: str) -> list[str]:
    return re.findall(r"Slave Interface: (\S+)\nMII Status: up", text)


def until(check: Any, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.3)
    return bool(check())


def lost_pings(summary: str) -> int:
    """Lost probes from ping's summary line ('N packets transmitted, M received')."""
    match = re.search(r"(\d+) packets transmitted, (\d+) received", summary)
    assert match, summary
    return int(match.group(1)) - int(match.group(2))


def reply_gaps_ms(ping_output: str) -> list[float]:
    """Gaps between consecutive replies of `ping -D`: the longest is the failover's outage."""
    stamps = [float(s) for s in re.findall(r"^\[(\d+\.\d+)\] \d+ bytes from", ping_output, re.M)]
    return [(later - earlier) * 1000 for earlier, later in itertools.pairwise(stamps)]


def ping_during_cut(node: LabNode, nic: str, seconds: int = 8) -> str:
    """Ping the peer through the bond every 10 ms while `nic` is cut; returns ping's output."""
    node.sh(
        f"sudo setsid -f sh -c 'ping -n -D -i 0.01 -w {seconds} -I {BOND} {PEER} "
        "> /tmp/failover.txt 2>&1; touch /tmp/failover.done'"
    )
    time.sleep(2)
    cut = node.cli("fault", "node1", "link-down", nic)
    assert cut.returncode == 0, cut.stderr
    assert until(
        lambda: "done" in node.sh("ls /tmp/failover.done 2>/dev/null && echo done || true"),
        seconds + 30,
    )
    return node.sh("cat /tmp/failover.txt")


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
