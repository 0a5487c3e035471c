"""The quick start's chain on one lab node (Debian 13, no internet), as `make demo` runs it:
lab up -> disk-grow -> build-image -> `lab apptainer-vars` -> provision -> verify, with only
what the lab inventory says of the node. Every role is applied (tmux, the bond over both bond
NICs, volume_grow filling out the grown data disk, the heartbeat watching the bond's peer and
the data disk with the probes it composed itself, the sample data set staged from the
controller, apptainer) and every check passes but the GPU's, which skip with "no NVIDIA GPU"
(a byte changed in a staged shard failing the full data set check, naming the shard, is
tests/integration/data/test_dataset_role.py's: the same role and check module, on the host);
the smoke drill SIGKILLs the trainer inside the image on the node, it resumes bit-exact, and
checkpoint.newest verifies the checkpoints the drill kept. Around it, what the apptainer role
must refuse: a package or an image whose sha256 is not the one given is not sent, and nothing
changes on the node.

The node also carries the bond's story, so that the bond is converged once in the lab tier:
before the chain, the nic_bond role refuses the NIC that carries SSH and its check mode
changes nothing; after the chain's first provision the active port is cut while pinging
through the bond (failover), the second provision then changes nothing, the bond's checks
fail by name with both links cut, and a change whose probe gets no answer is rolled back.
The 64 MiB written to the data disk before the chain survive volume_grow's online grow.
Then `nodeprep run` starts a job and `nodeprep drill` drills blackhole against the
MII-monitored bond (it fails: the bond did not notice), the nic_bond role switches the bond
to ARP monitoring, and netem, link, blackhole, ssh-drop, disk-full, preempt and reboot are
drilled against the job (tests/lab/spot_notice.py, tests/lab/drill_story.py): the preempt
drill's spot notice, posted at the stand-in metadata service on the node, reaches
the job as an emergency checkpoint within 5 s; the reboot costs at most one step.
Last, the data disk fills at a steady rate and the heartbeat's growth action grows it before
it is full, in steps, up to its maximum, then warns once (tests/lab/grow_story.py).

The torch image is the one the image tier built in this run (same path and content hash, so
build-image skips it); provision and verify run under the mitogen strategy (`--fast`), as in
the fleet test, to keep CI within its budget; `make demo` runs them under the linear one.
The rollout play of a provision that includes the bond runs linear even with `--fast`
(playbooks/provision.yml says why); the role's refusal and check mode, which activate
nothing, run under mitogen.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from grow_story import the_disk_grows_before_it_fills
from lab_helpers import LabNode
from nic_bond_helpers import (
    ADDRESS,
    BOND,
    active_member,
    bonding,
    lost_pings,
    members_up,
    ping_during_cut,
    profiles,
    reaches_peer_again,
    reply_gaps_ms,
    run_role,
    until,
    verify_fails_with_both_links_cut,
)
from spot_notice import spot_notice_gets_an_emergency_checkpoint
from verify_helpers import SLOW_NODE_VARS, failures, run_verify, statuses

from nodeprep.lab.apptainer import IMAGE_DEST
from nodeprep.lab.inventory import SAMPLE_DEST, SMOKE_CHECKPOINTS

pytestmark = [pytest.mark.lab, pytest.mark.timeout(2400)]
CACHE = "/var/cache/nodeprep/apptainer"
BOND_MARKER = "/etc/nodeprep/roles/nic_bond.json"
PORTS = {"ens4": "b0", "ens5": "b1"}  # the bond NICs and the lab's names for their links
WRITE_PAYLOAD = "sudo dd if=/dev/urandom of=/data/payload bs=1M count=64 status=none && sync"
PAYLOAD_SUM = "sha256sum /data/payload | cut -d' ' -f1"
GPU_SKIPPED = {"gpu.driver", "gpu.count", "gpu.temperature", "gpu.ecc", "gpu.xid"}
SKIPPED = {*GPU_SKIPPED, "interconnect.allreduce"}  # one node: nothing between nodes
PASSED = {"preflight.os", "preflight.disk", "heartbeat.service", "heartbeat.watchdog",
          "heartbeat.metrics", "heartbeat.probes", "tmux.version", "tmux.config", "tmux.linger",
          "tmux.logout_survival", "nic_bond.mode", "nic_bond.miimon", "nic_bond.members_up",
          "nic_bond.active_member", "nic_bond.peer", "volume_grow.size", "disk.size",
          "disk.free", "disk.writable", "checkpoint.newest", "apptainer.present",
          "apptainer.image_hash", "apptainer.runs", "smoke.drill", "dataset.sample"}  # fmt: skip


def provision(
    inventory: Path, env: dict[str, str], variables: dict[str, Any], workdir: Path, *args: str
) -> tuple[int, str, dict[str, Any]]:
    """`nodeprep provision --fast` with VARIABLES, as a user runs it; exit, output, summary."""
    varfile, summary = workdir / "provision-vars.json", workdir / "provision-summary.json"
    varfile.write_text(json.dumps(variables))
    summary.unlink(missing_ok=True)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("nodeprep")), "provision", str(inventory), "--fast",
         "-e", f"@{varfile}", "--json", str(summary), *args],
        capture_output=True, text=True, env=env, timeout=1500, check=False,
    )  # fmt: skip
    output = done.stdout[-6000:] + done.stderr[-3000:]
    print(output)
    assert summary.exists(), output
    return done.returncode, output, json.loads(summary.read_text())


def test_chain_provisions_builds_distributes_and_verify_passes_all_but_skips(
    lab_node: LabNode, torch_image: Path, tmp_path: Path
) -> None:
    grown = lab_node.cli("fault", "node1", "disk-grow", "2G")
    assert grown.returncode == 0, grown.stderr
    written = lab_node.cli("inventory", "--output", str(tmp_path / "lab.ini"))
    assert written.returncode == 0, written.stderr
    inventory = Path(written.stdout.strip())
    made = lab_node.cli("apptainer-vars", str(torch_image), "--output", str(tmp_path / "a.json"))
    assert made.returncode == 0, made.stderr
    good = json.loads(Path(made.stdout.strip()).read_text())
    debs = [Path(entry["src"]) for entry in good["apptainer_package_files"]]
    assert any(deb.name.startswith("apptainer_") for deb in debs), debs
    lab_node.sh(WRITE_PAYLOAD)
    payload = lab_node.sh(PAYLOAD_SUM)
    refused_and_checked_bond_changes_nothing(lab_node, inventory)

    # A package whose sha256 is not the one given: refused on the controller, nothing sent.
    wrong = [dict(good["apptainer_package_files"][0], sha256="0" * 64),
             *good["apptainer_package_files"][1:]]  # fmt: skip
    code, output, _ = provision(
        inventory, lab_node.env, {**good, "apptainer_package_files": wrong}, tmp_path,
        "--tags", "apptainer",
    )  # fmt: skip
    assert code == 1, output
    assert "did not match" in output, output
    assert "nothing was sent" in output, output
    assert lab_node.sh("command -v apptainer || echo absent").strip() == "absent"
    assert lab_node.sh(f"ls -A {CACHE} 2>/dev/null | wc -l").strip() == "0"

    # The chain's provision, then a second run that changes nothing.
    code, output, summary = provision(inventory, lab_node.env, good, tmp_path)
    assert code == 0, output
    assert summary["hosts"]["node1"]["changed"] > 0, summary
    bond_fails_over(lab_node)
    code, output, summary = provision(inventory, lab_node.env, good, tmp_path)
    assert code == 0, output
    assert summary["hosts"]["node1"]["changed"] == 0, output
    assert lab_node.sh(f"sha256sum {IMAGE_DEST}").split()[0] == good["apptainer_image_sha256"]
    # tmux by default: `auto` took Debian 13's 3.5a, so nothing was built.
    marker = json.loads(lab_node.sh("cat /etc/nodeprep/roles/tmux.json"))
    assert marker["install_method"] == "package", marker
    assert marker["binary"] == "/usr/bin/tmux", marker
    assert lab_node.sh("ls /opt").split().count("tmux-3.5a") == 0

    # Every role did its work: the bond over both NICs, the data disk filled out to 2 GiB.
    assert sorted(lab_node.sh("cat /sys/class/net/bond0/bonding/slaves").split()) == [
        "ens4",
        "ens5",
    ]
    assert ADDRESS in lab_node.sh(f"ip -br addr show {BOND}")
    assert int(lab_node.sh("df --output=size -B1M /data | tail -1")) > 1900
    assert lab_node.sh(PAYLOAD_SUM) == payload
    assert lab_node.sh("systemctl is-active nodeprep-heartbeat").strip() == "active"

    verify_passes_all_but_the_gpu_checks(inventory, tmp_path)

    verify_fails_with_both_links_cut(lab_node, inventory)
    bad_probe_is_rolled_back(lab_node, inventory)

    # An image whose sha256 is not the one given: refused, the node keeps its copy.
    code, output, _ = provision(
        inventory, lab_node.env, {**good, "apptainer_image_sha256": "f" * 64}, tmp_path,
        "--tags", "apptainer",
    )  # fmt: skip
    assert code == 1, output
    assert "nothing was copied" in output, output
    assert lab_node.sh(f"sha256sum {IMAGE_DEST}").split()[0] == good["apptainer_image_sha256"]

    spot_notice_gets_an_emergency_checkpoint(lab_node, inventory, good, tmp_path)
    the_disk_grows_before_it_fills(lab_node, inventory, good, tmp_path)


def refused_and_checked_bond_changes_nothing(node: LabNode, inventory: Path) -> None:
    """ens3 carries the SSH session: refused without the opt-in; check mode changes nothing."""
    before = profiles(node)
    refused = run_role(inventory, {"nic_bond_members": ["ens3", "ens4"]}, fast=True)
    assert refused.result.exit_code == 1
    assert "Refusing to bond ens3 into bond0" in refused.messages
    assert "management connection" in refused.messages
    assert profiles(node) == before
    checked = run_role(inventory, check=True, fast=True)
    assert checked.result.exit_code == 0, checked.messages
    assert checked.changed > 0
    assert profiles(node) == before
    assert "absent" in node.sh(f"test -e {BOND_MARKER} && echo present || echo absent")


def bond_fails_over(node: LabNode) -> None:
    """Cut the active port while pinging every 10 ms through the bond; then restore it."""
    text = bonding(node)
    assert "Bonding Mode: fault-tolerance (active-backup)" in text
    assert "MII Polling Interval (ms): 100" in text
    active = active_member(node)
    assert active in PORTS, text
    other = next(nic for nic in PORTS if nic != active)
    output = ping_during_cut(node, PORTS[active])
    assert until(lambda: active_member(node) == other)
    lost, gaps = lost_pings(output), reply_gaps_ms(output)
    print(f"failover {active} -> {other}: {lost} pings lost, longest gap {max(gaps):.0f} ms")
    assert re.search(r" [1-9][0-9]* received", output), output
    assert node.cli("fault", "node1", "link-up", PORTS[active]).returncode == 0
    assert until(lambda: sorted(members_up(bonding(node))) == sorted(PORTS))


def bad_probe_is_rolled_back(node: LabNode, inventory: Path) -> None:
    """A change whose proof fails (nothing answers at the probe target) is rolled back."""
    settled = profiles(node)
    bad = run_role(inventory, {
        "nic_bond_ipv4_address": "10.77.0.16/24", "nic_bond_probe_target": "10.77.0.99",
        "nic_bond_probe_timeout": 5,
    })  # fmt: skip
    assert bad.result.exit_code == 1
    assert "packets transmitted, 0 received" in bad.messages  # ping through the bond failed
    assert "Rolled back: NetworkManager restored the configuration" in bad.messages
    assert "on request" in bad.messages
    assert ADDRESS in node.sh(f"ip -br addr show {BOND}")
    assert "10.77.0.16" not in node.sh(f"nmcli -g ipv4.addresses connection show {BOND}")
    assert profiles(node) == settled
    # Both ports back in the bond: a rollback that leaves one out (seen twice: ens4 up but no
    # longer a port) leaves the node one link from being cut off. The role re-attaches it.
    assert until(lambda: sorted(members_up(bonding(node))) == sorted(PORTS)), bonding(node)
    if "brought up" in bad.messages:
        print("bad probe: the role re-attached what the rollback left out:",
              bad.messages[bad.messages.index("The rollback left"):][:200])  # fmt: skip
    reaches_peer_again(node)


def verify_passes_all_but_the_gpu_checks(inventory: Path, tmp_path: Path) -> None:
    """verify, told nothing but the inventory: all pass but the GPU's, which skip saying why,
    and the interconnect's, which has one node."""
    code, output, report = run_verify(
        inventory, tmp_path, "chain", "--fast", node_vars=SLOW_NODE_VARS
    )
    assert code == 0, output
    assert failures(report, "node1") == {}
    assert statuses(report, "skip", "node1") == SKIPPED
    assert statuses(report, "pass", "node1") >= PASSED
    details = {r["check"]: r["detail"] for r in report["results"]}
    print(
        "smoke.drill:", details["smoke.drill"], "\nheartbeat.probes:", details["heartbeat.probes"]
    )
    assert all("no NVIDIA GPU" in details[check] for check in GPU_SKIPPED), details
    assert details["interconnect.allreduce"].startswith("one node selected"), details
    assert "inside image " + IMAGE_DEST in details["smoke.drill"], details
    assert "matches bit for bit" in details["smoke.drill"], details
    assert f"on data set {SAMPLE_DEST} with 2 loader worker(s)" in details["smoke.drill"], details
    assert SMOKE_CHECKPOINTS in details["checkpoint.newest"], details
    # The heartbeat composed its probes from what the inventory and the node say.
    probes = details["heartbeat.probes"]
    assert "4 composed probes: bond-peer (the bond's peer (nic_bond_probe_target))" in probes
    assert "data-space (free space on /data, which holds /data, " in probes
    assert (
        "not watched: cloud metadata and notices: not a cloud VM (DMI sys_vendor 'QEMU'" in probes
    )
    assert "/data/datasets/sample: 2 files, 2.0 MiB" in details["dataset.sample"], details
    assert "PASSED" in output
