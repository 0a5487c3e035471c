"""Real ansible-runner runs of provision.yml --tags preflight against this machine.

The target is localhost over the local connection, in check mode: preflight
only reads state, so these runs change nothing here.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeprep.cli import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

NO_TIME_SYNC_CHECK = "preflight_time_sync_required=false"


def provision(inventory: Path, *args: str, json_out: Path | None = None) -> tuple[int, str]:
    extra = ["--json", str(json_out)] if json_out else []
    result = CliRunner().invoke(
        cli, ["provision", str(inventory), "--tags", "preflight", "--check", *extra, *args]
    )
    return result.exit_code, result.output


def test_supported_node_passes(local_inventory: Path, tmp_path: Path) -> None:
    summary_path = tmp_path / "summary.json"
    code, out = provision(local_inventory, "-e", NO_TIME_SYNC_CHECK, json_out=summary_path)
    assert code == 0, out
    assert "all hosts ok" in out
    summary = json.loads(summary_path.read_text())
    assert summary["exit_code"] == 0
    assert summary["hosts"]["localhost"]["failed"] == 0
    assert summary["hosts"]["localhost"]["ok"] >= 3
    assert summary["failures"] == []


def test_unsupported_os_is_refused(local_inventory: Path) -> None:
    code, out = provision(
        local_inventory,
        "-e",
        NO_TIME_SYNC_CHECK,
        "-e",
        '{"preflight_supported_distributions": ["Rocky 9"]}',
    )
    assert code == 1, out
    assert "is not supported (supported: Rocky 9)" in out
    assert "run nodeprep on a supported distribution" in out


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A real 16 MiB tmpfs, unmounted even when the test fails."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount_point)], check=True
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_low_disk_is_refused(local_inventory: Path, small_filesystem: Path) -> None:
    disk_vars = json.dumps(
        {"preflight_disk_paths": [str(small_filesystem)], "preflight_min_free_gb": 1}
    )
    code, out = provision(local_inventory, "-e", NO_TIME_SYNC_CHECK, "-e", disk_vars)
    assert code == 1, out
    assert f"The filesystem of {small_filesystem} has 0.0 GiB free" in out
    assert "less than preflight_min_free_gb=1 GiB" in out


def test_every_problem_is_reported_at_once(local_inventory: Path, tmp_path: Path) -> None:
    problems = json.dumps(
        {
            "preflight_supported_distributions": ["Rocky 9"],
            "preflight_disk_paths": [str(tmp_path / "nowhere")],
            "preflight_time_sync_services": ["nodeprep-no-such-timesync"],
        }
    )
    code, out = provision(local_inventory, "-e", problems)
    assert code == 1, out
    assert "preflight found 3 problem(s) on localhost" in out
    assert "No time synchronisation service is running" in out
    assert f"The path {tmp_path / 'nowhere'} cannot be checked" in out


def test_missing_python_is_refused(tmp_path: Path) -> None:
    inventory = tmp_path / "nopython.ini"
    inventory.write_text(
        "localhost ansible_connection=local ansible_python_interpreter=/nonexistent/python3\n"
    )
    code, out = provision(inventory)
    assert code == 1, out
    assert "has no usable Python 3.8 or newer" in out


def test_bad_role_variable_is_refused_before_any_task(local_inventory: Path) -> None:
    """Checked on the controller against the role's argument spec: bad input, nothing runs."""
    code, out = provision(local_inventory, "-e", "preflight_min_free_gb=lots")
    assert code == 2, out
    assert "-e: preflight_min_free_gb = 'lots' is not valid for role preflight" in out
    assert "running provision.yml" not in out
    assert "Probe the node's Python version" not in out


def test_unreachable_host_exits_3(tmp_path: Path) -> None:
    inventory = tmp_path / "dark.ini"
    # Port 9 on loopback: nothing listens there, so SSH is refused at once.
    inventory.write_text("dark ansible_host=127.0.0.1 ansible_port=9 ansible_user=nobody\n")
    code, out = provision(inventory)
    assert code == 3, out
    assert "unreachable: dark" in out
