"""preflight's verify checks on this machine: provision writes the marker, verify re-checks with
the recorded thresholds. The marker under /etc/nodeprep is removed afterwards."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeprep.cli import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
MARKER = Path("/etc/nodeprep/roles/preflight.json")


@pytest.fixture
def marker_cleanup() -> Iterator[Path]:
    if MARKER.exists():
        pytest.fail(f"{MARKER} exists on this machine; this test would overwrite it")
    created = [p for p in (MARKER.parent.parent, MARKER.parent) if not p.exists()]
    try:
        yield MARKER
    finally:
        MARKER.unlink(missing_ok=True)
        for path in created:
            shutil.rmtree(path, ignore_errors=True)


def checks(inventory: Path, tmp_path: Path) -> tuple[int, dict[str, tuple[str, str]]]:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        cli, ["verify", str(inventory), "--checks", "preflight", "--json", str(out)]
    )
    found = json.loads(out.read_text())["results"]
    return result.exit_code, {r["check"]: (r["status"], r["detail"]) for r in found}


def test_preflight_checks_use_the_provisioned_thresholds(
    local_inventory: Path, tmp_path: Path, marker_cleanup: Path
) -> None:
    code, found = checks(local_inventory, tmp_path)
    assert code == 0
    assert {k: v[0] for k, v in found.items()} == dict.fromkeys(
        ["preflight.python", "preflight.os", "preflight.disk", "preflight.time_sync"], "skip"
    )
    assert found["preflight.os"][1] == "role preflight not applied on this node"

    provision = CliRunner().invoke(
        cli, ["provision", str(local_inventory), "--tags", "preflight",
              "-e", "preflight_time_sync_required=false", "-e", "preflight_min_free_gb=1"],
    )  # fmt: skip
    assert provision.exit_code == 0, provision.output
    assert int(json.loads(marker_cleanup.read_text())["min_free_gb"]) == 1
    code, found = checks(local_inventory, tmp_path)
    assert code == 0
    assert {k: v[0] for k, v in found.items()} == {
        "preflight.python": "pass",
        "preflight.os": "pass",
        "preflight.disk": "pass",
        "preflight.time_sync": "skip",
    }

    recorded = json.loads(marker_cleanup.read_text())
    marker_cleanup.write_text(json.dumps({**recorded, "supported_distributions": ["Rocky 9"]}))
    code, found = checks(local_inventory, tmp_path)
    assert code == 1
    assert found["preflight.os"][0] == "fail"
    assert "is not supported (supported: Rocky 9)" in found["preflight.os"][1]
    assert found["preflight.disk"][0] == "pass"
