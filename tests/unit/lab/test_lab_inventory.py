"""The lab inventory must parse with Ansible's own INI parser into reachable loopback hosts."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from nodeprep.data.staging import parse_datasets
from nodeprep.lab.inventory import node_roles_vars, render_ini
from nodeprep.lab.state import LabState, NodeRecord


def _state(tmp_path: Path) -> LabState:
    nodes = [NodeRecord("node1", 40001, str(tmp_path / "n1"), 11),
             NodeRecord("node2", 40002, str(tmp_path / "n2"), 12)]  # fmt: skip
    return LabState("trixie", "abc", "tcg", str(tmp_path / "key dir" / "id_ed25519"), nodes)


def test_ini_lines(tmp_path: Path) -> None:
    text = render_ini(_state(tmp_path))
    assert text.startswith("[lab]\nnode1 ansible_host=127.0.0.1 ansible_port=40001 ")
    assert (
        "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'"
        in text
    )
    assert "ansible_python_interpreter=/usr/bin/python3" in text
    assert "ansible_become=true" in text


def _hostvars(tmp_path: Path) -> dict[str, dict[str, object]]:
    """The inventory as Ansible's own INI parser reads it."""
    path = tmp_path / "inv.ini"
    path.write_text(render_ini(_state(tmp_path)))
    inventory_cli = Path(sys.executable).with_name("ansible-inventory")
    done = subprocess.run(
        [str(inventory_cli), "-i", str(path), "--list"], capture_output=True, text=True, check=True
    )
    return dict(json.loads(done.stdout)["_meta"]["hostvars"])


def test_ansible_reads_it(tmp_path: Path) -> None:
    hostvars = _hostvars(tmp_path)
    assert set(hostvars) == {"node1", "node2"}
    node2 = hostvars["node2"]
    assert node2["ansible_port"] == 40002
    assert node2["ansible_user"] == "nodeprep"
    assert node2["ansible_ssh_private_key_file"] == str(tmp_path / "key dir" / "id_ed25519")
    assert node2["nodeprep_lab_bond_nics"] == ["ens4", "ens5"]
    assert node2["tmux_users"] == ["nodeprep"]
    # Each node's own bond address on the wired segments, which a job's ranks use.
    assert hostvars["node1"]["nic_bond_ipv4_address"] == "10.77.0.15/24"
    assert (node2["nic_bond_ipv4_address"], node2["job_address"]) == ("10.77.0.16/24", "10.77.0.16")
    assert "UserKnownHostsFile=/dev/null" in node2["ansible_ssh_common_args"]


def test_every_role_is_told_what_the_node_has(tmp_path: Path) -> None:
    """The values reach Ansible typed as node_roles_vars() gives them (lists stay lists)."""
    node1 = _hostvars(tmp_path)["node1"]
    assert {key: node1[key] for key in node_roles_vars()} == node_roles_vars()
    assert node1["nic_bond_members"] == ["ens4", "ens5"]
    assert node1["nic_bond_probe_target"] == "10.77.0.2"
    assert node1["volume_grow_volumes"] == [{"device": "/dev/vdb"}]
    assert "heartbeat_probes" not in node1  # the role composes them from the rest
    assert node1["node_checks_checkpoint_dirs"] == [node1["smoke_keep_checkpoints"]]


def test_the_sample_data_set_is_on_the_controller_with_its_hashes(tmp_path: Path) -> None:
    """The dataset role's input: shards written once beside the lab's key, proven by sha256."""
    (dataset,) = _hostvars(tmp_path)["node1"]["datasets"]
    assert (dataset["name"], dataset["dest"]) == ("sample", "/data/datasets/sample")
    assert parse_datasets([dataset])  # the role's own rules accept it
    for entry in dataset["files"]:
        data = Path(entry["src"]).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["size"] == len(data) == 1 << 20
    # Rendering again keeps the shards (same bytes, same hashes), as every lab must.
    assert _hostvars(tmp_path)["node1"]["datasets"] == [dataset]
