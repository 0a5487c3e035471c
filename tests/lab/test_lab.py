"""The lab against real qemu VMs: reach a node, cut a bond NIC, grow the data disk, clean up.

One restored node carries the four steps in turn (a restore costs seconds under TCG)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lab_helpers import LabNode

from nodeprep.lab.node import BOND_PEER

pytestmark = pytest.mark.lab
GIB = 1024**3


def _until(check: object, timeout_s: float = 20.0) -> bool:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.3)
    return bool(check())


def test_node_answers_its_bond_nic_and_disk_faults_then_down_cleans_up(
    lab_node: LabNode, tmp_path: Path
) -> None:
    answers_ansible_ping_through_inventory(lab_node, tmp_path)
    bond_nic_cut_and_restored_through_qmp(lab_node)
    data_disk_grown_through_qmp_is_seen_and_usable(lab_node)
    down_ends_its_processes_and_removes_its_files(lab_node)


def answers_ansible_ping_through_inventory(lab_node: LabNode, tmp_path: Path) -> None:
    written = lab_node.cli("inventory", "--output", str(tmp_path / "lab.ini"))
    assert written.returncode == 0, written.stderr
    inventory = Path(written.stdout.strip())
    ansible = Path(sys.executable).with_name("ansible")
    done = lab_node.cli("status")
    assert re.search(r"node1\s+running", done.stdout), done.stdout
    ping = subprocess.run(
        [str(ansible), "all", "-i", str(inventory), "-m", "ansible.builtin.ping"],
        capture_output=True, text=True, timeout=300, env=lab_node.env, check=False,
    )  # fmt: skip
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert '"ping": "pong"' in ping.stdout
    # A restored guest starts in the past; `up` must have set its clock and its name.
    guest_epoch = float(lab_node.sh("date +%s.%N"))
    assert abs(guest_epoch - time.time()) < 30
    assert lab_node.sh("hostname").strip() == "node1"


def bond_nic_cut_and_restored_through_qmp(lab_node: LabNode) -> None:
    lab_node.sh(
        "sudo ip link add bond0 type bond mode active-backup miimon 100 && "
        "sudo ip link set ens4 down && sudo ip link set ens4 master bond0 && "
        "sudo ip link set ens5 down && sudo ip link set ens5 master bond0 && "
        "sudo ip link set bond0 up && sudo ip addr add 10.77.0.15/24 dev bond0"
    )
    assert _until(lambda: "0 received" not in lab_node.sh(f"ping -c1 -W1 {BOND_PEER} || true"))
    assert lab_node.sh("cat /sys/class/net/ens4/carrier").strip() == "1"

    cut = lab_node.cli("fault", "node1", "link-down", "b0")
    assert cut.returncode == 0, cut.stderr
    assert _until(lambda: lab_node.sh("cat /sys/class/net/ens4/carrier || true").strip() == "0")
    bonding = lab_node.sh("cat /proc/net/bonding/bond0")
    assert "Currently Active Slave: ens5" in bonding
    # The peer still answers through the other NIC: the segment survives the cut.
    assert _until(lambda: "0 received" not in lab_node.sh(f"ping -c1 -W1 {BOND_PEER} || true"))

    restored = lab_node.cli("fault", "node1", "link-up", "b0")
    assert restored.returncode == 0, restored.stderr
    assert _until(lambda: lab_node.sh("cat /sys/class/net/ens4/carrier").strip() == "1")


def data_disk_grown_through_qmp_is_seen_and_usable(lab_node: LabNode) -> None:
    def guest_bytes() -> int:
        return int(lab_node.sh("cat /sys/block/vdb/size")) * 512

    assert guest_bytes() == 1 * GIB
    grown = lab_node.cli("fault", "node1", "disk-grow", "2G")
    assert grown.returncode == 0, grown.stderr
    assert _until(lambda: guest_bytes() == 2 * GIB)
    lab_node.sh("sudo growpart /dev/vdb 1 && sudo resize2fs /dev/vdb1")
    assert int(lab_node.sh("df --output=size -B1M /data | tail -1")) > 1800

    shrink = lab_node.cli("fault", "node1", "disk-grow", "1G")
    assert shrink.returncode == 2
    assert "not larger than the current" in shrink.stderr


def down_ends_its_processes_and_removes_its_files(lab_node: LabNode) -> None:
    pid = lab_node.state.nodes[0].pid
    assert Path(f"/proc/{pid}").exists()
    done = lab_node.cli("down")
    assert done.returncode == 0, done.stderr
    assert f"[{pid}]" in done.stdout
    gone = _until(lambda: not Path(f"/proc/{pid}").exists() or "Z" in _state(pid), 10)
    assert gone
    assert not lab_node.lab_dir.exists()
    again = lab_node.cli("status")
    assert again.returncode == 2
    assert "No lab is running" in again.stderr


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return ""
