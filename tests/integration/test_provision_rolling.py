"""The rolling play of provision.yml for real: three inventory hosts, canary first.

The hosts are this machine under three names (local connection), so what is compared is
what Ansible ran where; the lab tier repeats this on separate VMs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeprep.cli import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

MARKER = Path("/etc/nodeprep/roles/volume_grow.json")


@pytest.fixture(autouse=True)
def _keep_host_clean() -> Iterator[None]:
    """volume_grow records its applied marker on this machine: remove one this test made."""
    existed = MARKER.exists()
    yield
    if not existed:
        MARKER.unlink(missing_ok=True)


def inventory(tmp_path: Path, broken: str | None = None) -> Path:
    """Three hosts; `broken` gets a volume whose mount point does not exist."""
    lines = ["[nodes]"]
    for name in ("n1", "n2", "n3"):
        volumes = '[{"mount": "/nonexistent/nodeprep-test"}]' if name == broken else "[]"
        lines.append(
            f"{name} ansible_connection=local ansible_python_interpreter={sys.executable} "
            f"ansible_become_method=su volume_grow_volumes='{volumes}'"
        )
    path = tmp_path / "fleet.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


def provision(tmp_path: Path, inv: Path, *args: str) -> tuple[int, str, dict[str, object]]:
    out = tmp_path / "summary.json"
    result = CliRunner().invoke(
        cli, ["provision", str(inv), "--tags", "volume_grow", "--json", str(out), *args]
    )
    return result.exit_code, result.output, json.loads(out.read_text())


def test_failing_canary_stops_the_rollout_before_other_nodes(tmp_path: Path) -> None:
    code, output, summary = provision(tmp_path, inventory(tmp_path, broken="n2"), "--canary", "n2")
    assert code == 1, output
    assert "rollout batch 1/3: n2" in output
    assert "rollout stopped at the canary (n2): n2 failed" in output
    assert "Nothing is mounted at /nonexistent/nodeprep-test" in output
    assert "never touched by the disruptive roles: n1, n3" in output
    # Ansible ran nothing at all on the other two.
    assert summary["rollout"] == {
        "planned": [["n2"], ["n1"], ["n3"]],
        "batches": [["n2"]],
        "stopped": True,
        "untouched": ["n1", "n3"],
    }


def test_good_change_rolls_through_every_batch(tmp_path: Path) -> None:
    code, output, _ = provision(tmp_path, inventory(tmp_path), "--batches", "1,2")
    assert code == 0, output
    assert "rollout batch 1/2: n1" in output
    assert "rollout batch 2/2: n2, n3" in output
    assert "stopped" not in output


def test_no_rolling_runs_one_batch_and_bad_batches_are_refused(tmp_path: Path) -> None:
    code, output, _ = provision(tmp_path, inventory(tmp_path), "--no-rolling")
    assert code == 0, output
    assert "rollout batch 1/1: n1, n2, n3" in output
    bad = CliRunner().invoke(cli, ["provision", str(inventory(tmp_path)), "--batches", "1,x"])
    assert bad.exit_code == 2
    assert "--batches '1,x': 'x' is not a node count or a percentage" in bad.output
    canary = CliRunner().invoke(cli, ["provision", str(inventory(tmp_path)), "--canary", "n9"])
    assert canary.exit_code == 2
    assert "--canary 'n9' is not one of the selected hosts" in canary.output
