"""The lab against real qemu VMs: reach a node, cut a bond NIC, grow the data disk, stage a data
set over a network that fails, clean up.

One restored node carries the five steps in turn (a restore costs seconds under TCG)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from lab_helpers import LabNode
from verify_helpers import SLOW_NODE_VARS, failures, run_verify, statuses

from integration.data.flaky_server import Drop, FlakyServer
from nodeprep.lab.fileserve import reverse_tunnel
from nodeprep.lab.node import BOND_PEER

pytestmark = pytest.mark.lab
GIB = 1024**3
MIB = 1024**2


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
    inventory = answers_ansible_ping_through_inventory(lab_node, tmp_path)
    bond_nic_cut_and_restored_through_qmp(lab_node)
    data_disk_grown_through_qmp_is_seen_and_usable(lab_node)
    a_download_survives_a_server_outage_and_a_cut_management_link(lab_node, tmp_path, inventory)
    down_ends_its_processes_and_removes_its_files(lab_node)


def answers_ansible_ping_through_inventory(lab_node: LabNode, tmp_path: Path) -> Path:
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
    return inventory


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


def a_download_survives_a_server_outage_and_a_cut_management_link(
    lab_node: LabNode, tmp_path: Path, inventory: Path
) -> None:
    """The dataset role stages one 6 MiB file from an HTTP server on the controller, reached
    through a reverse tunnel on the management link and paced at 512 KiB/s. The server ends
    the body at 1.5 MiB and goes away for 5 s; once the resumed body has brought 512 KiB
    more, the management link is cut for 8 s and more (the guest loses carrier; the node's
    reads time out after 4 s). Each time the node resumes from the byte it reached, the file
    lands with its sha256, and verify's full check of the data set passes. Provision's
    output goes to staging.log in the test's directory."""
    content = random.Random(24).randbytes(6 * MIB)
    digest = hashlib.sha256(content).hexdigest()
    guest_port, dest = 18080, "/data/datasets/net"
    variables = {
        "datasets": [{"name": "net", "dest": dest, "files": [
            {"url": f"http://127.0.0.1:{guest_port}/data.bin", "sha256": digest,
             "size": len(content)}]}],
        "dataset_timeout_s": 4, "dataset_retry_max_delay": 4,
    }  # fmt: skip
    varfile, summary = tmp_path / "staging-vars.json", tmp_path / "staging.json"
    varfile.write_text(json.dumps(variables))
    log = tmp_path / "staging.log"
    first_cut = 3 * MIB // 2
    with (
        FlakyServer(content) as server,
        # keepalives ride out the cut: 12 unanswered, 5 s apart
        reverse_tunnel(lab_node.target, guest_port, server.port, alive_count=12),
        log.open("w") as output,
    ):
        server.faults.pace_bytes_s = 512 * 1024
        server.faults.drops = [Drop(first_cut, outage=5.0)]
        began = time.monotonic()
        staging = subprocess.Popen(
            [str(Path(sys.executable).with_name("nodeprep")), "provision", str(inventory),
             "--fast", "--tags", "dataset", "-e", f"@{varfile}", "--json", str(summary)],
            stdout=output, stderr=subprocess.STDOUT, text=True, env=lab_node.env,
            start_new_session=True,  # a failed test ends ansible-playbook with it, by group
        )  # fmt: skip
        try:
            # the body resumed after the outage has brought 512 KiB: 4 MiB (8 s) are left
            resumed = _until(
                lambda: any((r.range_start or 0) >= first_cut and r.sent >= MIB // 2
                            for r in server.snapshot()),
                240,
            )  # fmt: skip
            assert resumed, (server.snapshot(), server.outages, log.read_text())
            cut_at = time.monotonic()
            cut = lab_node.cli("fault", "node1", "link-down", "mgmt")
            try:
                time.sleep(8)
            finally:
                restored = lab_node.cli("fault", "node1", "link-up", "mgmt")
            back_at = time.monotonic()
            assert cut.returncode == 0, cut.stderr
            assert restored.returncode == 0, restored.stderr
            staging.wait(timeout=600)
        finally:
            if staging.poll() is None:
                os.killpg(staging.pid, signal.SIGKILL)
                staging.wait()
        requests = server.snapshot()
        starts = [r.range_start for r in requests]
        # no request reaches the server while the link is down: these came after it was back
        after_cut = [r.range_start for r in requests if r.at > back_at]
        print(f"staging: provision exit {staging.returncode} after "
              f"{time.monotonic() - began:.1f} s (link cut {cut_at - began:.1f} s in, for "
              f"{back_at - cut_at:.1f} s); {len(requests)} requests, Range starts {starts}, "
              f"{server.bytes_sent} bytes sent for {len(content)} (the tunnel buffers "
              "bodies of requests the node gave up on)")  # fmt: skip
    assert staging.returncode == 0, log.read_text()[-6000:]
    assert len(server.outages) == 1, server.outages
    # the outage: resumed where the body ended; never again from the start, never backwards
    assert starts[:2] == [None, first_cut], starts
    assert None not in starts[1:], starts
    assert starts[1:] == sorted(starts[1:]), starts
    # the cut: asked again once the link was back, past the bytes that came before the cut
    # (the server had sent 512 KiB more; what reached the node is kept, not a whole MiB only)
    assert after_cut, starts
    assert all((start or 0) > first_cut for start in after_cut), starts
    staged_file_passes_verify(lab_node, tmp_path, inventory, variables)


def staged_file_passes_verify(
    lab_node: LabNode, tmp_path: Path, inventory: Path, variables: dict[str, Any]
) -> None:
    """The file the role staged is whole, no part is left, and verify's full check passes."""
    (dataset,) = variables["datasets"]
    dest, digest = dataset["dest"], dataset["files"][0]["sha256"]
    assert lab_node.sh(f"sha256sum {dest}/data.bin").split()[0] == digest
    left = lab_node.sh(f"ls -A {dest}").split()
    assert "data.bin" in left, left
    assert not [name for name in left if name.endswith(".part")], left
    code, report_output, report = run_verify(
        inventory, tmp_path, "staged", "--fast", "--checks", "dataset",
        node_vars={**SLOW_NODE_VARS, **variables, "dataset_verify_full": True},
    )  # fmt: skip
    assert code == 0, report_output
    assert failures(report, "node1") == {}
    assert "dataset.net" in statuses(report, "pass", "node1")


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
