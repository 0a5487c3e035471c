"""volume_grow's verify check against this machine's real root filesystem.

The check reads the role's applied marker and compares `df` with the size each volume was
grown to. The marker lives at a fixed path, so the test writes one there (keeping and
restoring any marker this machine already had) and reads the checks through the runner.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeprep import runner

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MARKER = Path("/etc/nodeprep/roles/volume_grow.json")
VERIFY = """\
- name: Verify the volume_grow role
  hosts: all
  gather_facts: false
  tasks:
    - name: Run the volume_grow checks
      ansible.builtin.include_role:
        name: volume_grow
        tasks_from: verify
"""


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    kept = tmp_path / "kept-marker.json"
    if MARKER.exists():
        shutil.copy2(MARKER, kept)
    MARKER.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield MARKER
    finally:
        if kept.exists():
            shutil.copy2(kept, MARKER)
        else:
            MARKER.unlink(missing_ok=True)


def size_check(marker: Path, volumes: list[dict[str, Any]], inventory: Path, tmp: Path) -> Any:
    marker.write_text(json.dumps({"role": "volume_grow", "volumes": volumes}))
    playbook = tmp / "verify.yml"
    playbook.write_text(VERIFY)
    result = runner.run(runner.RunRequest(playbook=playbook, inventory=inventory))
    assert result.exit_code == 0, [failure.message for failure in result.failures]
    (check,) = [item for item in result.results if item["check"] == "volume_grow.size"]
    return check


def root_volume(size_gb: float | None) -> dict[str, Any]:
    return {"disk": "/dev/root", "filesystem_device": "/dev/root", "mount": "/",
            "fstype": "ext4", "size_gb": size_gb}  # fmt: skip


def test_size_passes_when_the_filesystem_has_the_grown_size(
    marker: Path, local_inventory: Path, tmp_path: Path
) -> None:
    check = size_check(marker, [root_volume(0.5), root_volume(None)], local_inventory, tmp_path)
    assert check["status"] == "pass", check
    assert "/ is " in check["detail"]
    assert " for a volume grown to 0.5 GiB" in check["detail"]


def test_size_fails_naming_the_short_volume_and_the_fix(
    marker: Path, local_inventory: Path, tmp_path: Path
) -> None:
    check = size_check(marker, [root_volume(0.5), root_volume(100000)], local_inventory, tmp_path)
    assert check["status"] == "fail", check
    assert "for a volume grown to 100000.0 GiB; run provision again" in check["detail"]
    assert "0.5 GiB" not in check["detail"]  # only the short volume is named


def test_size_skips_when_the_marker_lists_no_volume(
    marker: Path, local_inventory: Path, tmp_path: Path
) -> None:
    check = size_check(marker, [], local_inventory, tmp_path)
    assert check["status"] == "skip", check
    assert check["detail"] == "the marker lists no volume"
