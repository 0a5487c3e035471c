"""`nodeprep verify` against this machine over the local connection: disk, checkpoints, GPU skip,
and the smoke drill with the real trainer and a real SIGKILL."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from nodeprep.checkpoint import commit_checkpoint
from nodeprep.cli import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


def verify(inventory: Path, tmp: Path, *args: str) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    out = tmp / "report.json"
    result = CliRunner().invoke(cli, ["verify", str(inventory), "--json", str(out), *args])
    data = json.loads(out.read_text()) if out.exists() else {}
    return result.exit_code, result.output, data


def statuses(data: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {r["check"]: r["status"] for r in data["results"]}


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 8 MiB tmpfs holding checkpoints, unmounted even when the test fails."""
    mount = tmp_path / "data"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], check=True)
    try:
        for step in (4, 8):
            commit_checkpoint(mount / "ckpt", step, "full", {"m.pt": {"w": torch.ones(256) * step}})
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def node_vars(data_dir: Path) -> str:
    return json.dumps(
        {
            "node_checks_disk_paths": [
                {"path": str(data_dir), "min_size_gb": 0.005, "min_free_gb": 0.002}
            ],
            "node_checks_checkpoint_dirs": [str(data_dir / "ckpt")],
            "smoke_python": sys.executable,
            "smoke_work_parent": str(data_dir.parent),
        }
    )


def test_healthy_node_passes_with_gpu_skipped(
    local_inventory: Path, small_fs: Path, tmp_path: Path
) -> None:
    junit = tmp_path / "verify.xml"
    code, out, data = verify(
        local_inventory, tmp_path, "-e", node_vars(small_fs), "--junit", str(junit),
        "--checks", "disk,checkpoint,gpu,smoke",
    )  # fmt: skip
    assert code == 0, out
    found = statuses(data)
    assert {k: v for k, v in found.items() if not k.startswith("gpu.")} == {
        "disk.size": "pass",
        "disk.free": "pass",
        "disk.writable": "pass",
        "checkpoint.newest": "pass",
        "smoke.drill": "pass",
    }
    assert found["gpu.driver"] == "skip"
    drill = next(r for r in data["results"] if r["check"] == "smoke.drill")
    assert "matches bit for bit" in drill["detail"]
    assert "ran outside any image" in drill["detail"]
    assert 'name="smoke.drill"' in junit.read_text()
    assert "PASSED" in out


@pytest.mark.parametrize("strategy", [(), ("--fast",)], ids=["linear", "mitogen"])
def test_full_disk_and_corrupt_checkpoint_fail_by_name(
    local_inventory: Path, small_fs: Path, tmp_path: Path, strategy: tuple[str, ...]
) -> None:
    newest = small_fs / "ckpt" / "ckpt-0000000008-full" / "m.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, same size: only the sha256 can tell
    newest.write_bytes(bytes(data))
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={small_fs}/fill", "bs=64k"], check=False, capture_output=True
    )
    code, out, found = verify(
        local_inventory, tmp_path, "-e", node_vars(small_fs), "--checks", "disk,checkpoint",
        *strategy,
    )  # fmt: skip
    assert code == 1, out
    assert statuses(found) == {
        "disk.size": "pass",
        "disk.free": "fail",
        "disk.writable": "fail",
        "checkpoint.newest": "fail",
    }
    assert "a resume falls back to ckpt-0000000004-full (step 4)" in out


def test_bad_checks_name_is_refused(local_inventory: Path, tmp_path: Path) -> None:
    code, out, _ = verify(local_inventory, tmp_path, "--checks", "heartbeet")
    assert code == 2
    assert "--checks 'heartbeet' names no check group" in out


def test_unreachable_host_exits_3(tmp_path: Path) -> None:
    inventory = tmp_path / "dark.ini"
    inventory.write_text("dark ansible_host=127.0.0.1 ansible_port=9 ansible_user=nobody\n")
    code, out, data = verify(inventory, tmp_path, "--checks", "disk")
    assert code == 3, out
    assert data["unreachable"] == ["dark"]
    assert statuses(data) == {"verify.reachable": "fail"}


def test_heartbeat_drill_sees_an_emergency_checkpoint_land(
    local_inventory: Path, tmp_path: Path
) -> None:
    """--drill: a real heartbeat daemon trips on its stopped target and the trainer saves."""
    variables = json.dumps({"smoke_python": sys.executable, "smoke_work_parent": str(tmp_path)})
    code, out, data = verify(
        local_inventory, tmp_path, "--checks", "drill", "--drill", "-e", variables
    )
    assert code == 0, out
    assert statuses(data) == {"drill.heartbeat": "pass"}
    detail = data["results"][0]["detail"]
    assert "emergency checkpoint ckpt-" in detail
    assert "after SIGUSR1" in detail
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("nodeprep-hbdrill-")] == []


def test_drill_checks_need_the_drill_flag(local_inventory: Path, tmp_path: Path) -> None:
    code, out, _ = verify(local_inventory, tmp_path, "--checks", "drill")
    assert code == 2
    assert "add --drill to allow them" in out
