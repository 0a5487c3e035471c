"""The tmux role's verify checks against this machine's own tmux, through nodeprep's runner.

The checks only read: they run the installed tmux in a throwaway server on a private socket
and read a marker that each test writes to a temporary path. This machine has tmux (from
.ci/apt-packages.txt) and no /etc/tmux.conf, so a new server starts with tmux's defaults.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from nodeprep import runner

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

VERIFY = """\
- name: Verify the tmux role
  hosts: all
  gather_facts: false
  tasks:
    - name: Run the tmux checks
      ansible.builtin.include_role:
        name: tmux
        tasks_from: verify
"""


def verify(inventory: Path, tmp_path: Path, marker: Path) -> dict[str, dict[str, Any]]:
    playbook = tmp_path / "verify.yml"
    playbook.write_text(VERIFY)
    request = runner.RunRequest(
        playbook=playbook, inventory=inventory, extra_vars={"__tmux_marker_path": str(marker)}
    )
    result = runner.run(request)
    assert result.exit_code == 0, [failure.message for failure in result.failures]
    return {str(item["check"]): item for item in result.results}


def write_marker(path: Path, settings: dict[str, str]) -> Path:
    tmux = shutil.which("tmux")
    assert tmux is not None, "tmux is in .ci/apt-packages.txt"
    marker = {
        "install_method": "package",
        "version": "",
        "min_version": "2.9",
        "binary": tmux,
        "config_path": "/etc/tmux.conf",
        "settings": settings,
        "users": [],
        "logind_exclude_users": True,
    }
    path.write_text(json.dumps(marker))
    return path


@pytest.fixture(autouse=True)
def no_system_config() -> None:
    if Path("/etc/tmux.conf").exists():
        pytest.skip("/etc/tmux.conf exists here; these tests expect tmux's built-in defaults")


def test_every_check_skips_without_the_marker(local_inventory: Path, tmp_path: Path) -> None:
    checks = verify(local_inventory, tmp_path, tmp_path / "absent.json")
    assert set(checks) == {"tmux.version", "tmux.config", "tmux.linger", "tmux.logout_survival"}
    for check in checks.values():
        assert check["status"] == "skip"
        assert check["detail"] == "role tmux not applied on this node"


def test_config_passes_when_the_server_matches_and_fails_when_it_does_not(
    local_inventory: Path, tmp_path: Path
) -> None:
    defaults = {"remain-on-exit": "off", "history-limit": "2000"}
    checks = verify(local_inventory, tmp_path, write_marker(tmp_path / "m.json", defaults))
    assert checks["tmux.version"]["status"] == "pass", checks["tmux.version"]
    assert checks["tmux.config"]["status"] == "pass", checks["tmux.config"]
    assert checks["tmux.linger"]["status"] == "skip"

    hardened = {"remain-on-exit": "on", "history-limit": "100000"}
    checks = verify(local_inventory, tmp_path, write_marker(tmp_path / "m.json", hardened))
    assert checks["tmux.config"]["status"] == "fail"
    assert '"remain-on-exit": "off"' in checks["tmux.config"]["detail"]
    assert "fix /etc/tmux.conf" in checks["tmux.config"]["detail"]


def test_an_unreadable_marker_fails_instead_of_passing(
    local_inventory: Path, tmp_path: Path
) -> None:
    checks = verify(local_inventory, tmp_path, tmp_path)  # a directory, not a file
    for check in checks.values():
        assert check["status"] == "fail", check
        assert "could not be read" in check["detail"]
