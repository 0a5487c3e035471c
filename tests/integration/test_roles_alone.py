"""Each role of provision.yml runs alone (``--tags ROLE``) and bad role input changes nothing.

Real ansible-runner runs of ``nodeprep provision`` against this machine over the local
connection, in check mode: nothing here is changed. A role that relied on facts another role
gathered (heartbeat once did, on preflight's) fails with "Error while evaluating
conditional"; here each role may still fail for this machine's own reasons (no systemd as
PID 1, no NetworkManager), and the test names those, but never for a missing fact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from nodeprep import paths
from nodeprep.cli import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

# What each role needs to be switched on in provision.yml (its `when`), nothing more.
ENABLE: dict[str, dict[str, Any]] = {
    "apptainer": {"nodeprep_apptainer": True},
    "nic_bond": {
        "nic_bond_members": ["lo"],
        "nic_bond_ipv4_address": "10.77.0.15/24",
        "nic_bond_probe_target": "10.77.0.2",
    },
    "volume_grow": {"volume_grow_volumes": [{"mount": "/nonexistent/nodeprep-test"}]},
    # A size given: check mode plans without asking the (absent) server anything.
    "dataset": {
        "datasets": [
            {
                "name": "t",
                "dest": "/var/lib/nodeprep-test-dataset",
                "files": [{"url": "http://127.0.0.1:9/shard.bin", "sha256": "0" * 64, "size": 1}],
            }
        ]
    },
}
MISSING_FACT = ("Error while evaluating conditional", "is undefined", "has no attribute")


def roles_of_provision() -> list[str]:
    plays = yaml.safe_load(paths.playbook("provision.yml").read_text())
    return [entry["role"] for play in plays for entry in play.get("roles", [])]


def provision(inventory: Path, tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    summary = tmp_path / "summary.json"
    result = CliRunner().invoke(
        cli, ["provision", str(inventory), "--check", "--json", str(summary), *args]
    )
    data = json.loads(summary.read_text()) if summary.exists() else {}
    return result.exit_code, data, result.output


def test_the_playbook_composes_every_role() -> None:
    assert set(roles_of_provision()) == {
        "preflight", "tmux", "heartbeat", "dataset", "apptainer", "nic_bond", "volume_grow",
    }  # fmt: skip


@pytest.mark.parametrize("role", roles_of_provision())
def test_role_runs_alone_without_another_roles_facts(
    role: str, local_inventory: Path, tmp_path: Path
) -> None:
    variables = json.dumps(ENABLE.get(role, {}))
    code, summary, out = provision(local_inventory, tmp_path, "--tags", role, "-e", variables)
    assert code in (0, 1), out
    assert summary["hosts"]["localhost"]["ok"] >= 1, out
    for failure in summary["failures"]:
        assert not any(sign in failure["message"] for sign in MISSING_FACT), failure
    print(f"{role}: exit {code}; " + "; ".join(f["message"][:120] for f in summary["failures"]))


def test_unknown_probe_type_is_refused_before_the_node_changes(
    local_inventory: Path, tmp_path: Path
) -> None:
    """A templated value passes the controller's check (tests/unit/test_role_vars_input.py
    refuses a plain one with exit 2); the role's own config check refuses it once rendered."""
    probes = json.dumps({"heartbeat_probes": [{"name": "net", "type": "{{ 'ping' }}"}]})
    code, summary, out = provision(local_inventory, tmp_path, "--tags", "heartbeat", "-e", probes)
    assert code == 1, out
    (failure,) = summary["failures"]
    assert "heartbeat config: probes[0].type: unknown probe type 'ping'" in failure["message"]
    # In check mode the user and venv tasks would report "changed": none of them ran.
    assert summary["hosts"]["localhost"]["changed"] == 0


@pytest.mark.parametrize("size", [-5, 0])
def test_volume_size_that_is_no_size_is_refused(
    size: int, local_inventory: Path, tmp_path: Path
) -> None:
    volumes = json.dumps({"volume_grow_volumes": [{"device": "/dev/vdb", "size_gb": size}]})
    args = ("--tags", "volume_grow", "-e", volumes)
    code, summary, out = provision(local_inventory, tmp_path, *args)
    assert code == 1, out
    (failure,) = summary["failures"]
    assert "a size_gb of 1 GiB or more" in failure["message"]
    assert summary["hosts"]["localhost"]["changed"] == 0
