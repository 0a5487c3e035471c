"""The tmux role's verify checks against this machine's own tmux, through nodeprep's runner.

The checks only read: they run the installed tmux in a throwaway server on a private socket
and read a marker that each test writes to a temporary path. This machine has tmux (from
.ci/apt-packages.txt) and no /etc/tmux.conf, so a new server starts with tmux's defaults.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodeprep import runner
from nodeprep.cli import cli

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


def verify(inventory: Path, tmp_path: Path, markers: Path) -> dict[str, dict[str, Any]]:
    playbook = tmp_path / "verify.yml"
    playbook.write_text(VERIFY)
    request = runner.RunRequest(
        playbook=playbook, inventory=inventory, extra_vars={"__tmux_marker_dir": str(markers)}
    )
    result = runner.run(request)
    assert result.exit_code == 0, [failure.message for failure in result.failures]
    return {str(item["check"]): item for item in result.results}


def write_marker(markers: Path, settings: dict[str, str]) -> Path:
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
    markers.mkdir(exist_ok=True)
    (markers / "tmux.json").write_text(json.dumps(marker))
    return markers


@pytest.fixture(autouse=True)
def no_system_config() -> None:
    if Path("/etc/tmux.conf").exists():
        pytest.skip("/etc/tmux.conf exists here; these tests expect tmux's built-in defaults")


def test_every_check_skips_without_the_marker(local_inventory: Path, tmp_path: Path) -> None:
    checks = verify(local_inventory, tmp_path, tmp_path / "no-markers")
    assert set(checks) == {"tmux.version", "tmux.config", "tmux.linger", "tmux.logout_survival"}
    for check in checks.values():
        assert check["status"] == "skip"
        assert check["detail"] == "role tmux not applied on this node"


def test_config_passes_when_the_server_matches_and_fails_when_it_does_not(
    local_inventory: Path, tmp_path: Path
) -> None:
    defaults = {"remain-on-exit": "off", "history-limit": "2000"}
    checks = verify(local_inventory, tmp_path, write_marker(tmp_path / "markers", defaults))
    assert checks["tmux.version"]["status"] == "pass", checks["tmux.version"]
    assert checks["tmux.config"]["status"] == "pass", checks["tmux.config"]
    assert checks["tmux.linger"]["status"] == "skip"

    hardened = {"remain-on-exit": "on", "history-limit": "100000"}
    checks = verify(local_inventory, tmp_path, write_marker(tmp_path / "markers", hardened))
    assert checks["tmux.config"]["status"] == "fail"
    assert '"remain-on-exit": "off"' in checks["tmux.config"]["detail"]
    assert "fix /etc/tmux.conf" in checks["tmux.config"]["detail"]


def test_an_unreadable_marker_fails_instead_of_passing(
    local_inventory: Path, tmp_path: Path
) -> None:
    (tmp_path / "markers" / "tmux.json").mkdir(parents=True)  # a directory, not a file
    checks = verify(local_inventory, tmp_path, tmp_path / "markers")
    for check in checks.values():
        assert check["status"] == "fail", check
        assert "cannot be read" in check["detail"]


def test_a_corrupt_marker_fails_and_says_so(local_inventory: Path, tmp_path: Path) -> None:
    (tmp_path / "markers").mkdir()
    (tmp_path / "markers" / "tmux.json").write_text('{"binary": "/usr/bin/tmux"')  # cut short
    checks = verify(local_inventory, tmp_path, tmp_path / "markers")
    assert len(checks) == 4
    for check in checks.values():
        assert check["status"] == "fail", check
        assert "is not valid JSON" in check["detail"], check


def test_verify_timeout_reaches_the_tmux_probe(local_inventory: Path, tmp_path: Path) -> None:
    """--timeout ends a hung tmux probe (its task once hard-coded 30 s) and names it."""
    pid_file = tmp_path / "hung.pid"
    hung = tmp_path / "tmux"
    hung.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 120\n")
    hung.chmod(0o755)
    markers = write_marker(tmp_path / "markers", {"history-limit": "2000"})
    marker = json.loads((markers / "tmux.json").read_text())
    (markers / "tmux.json").write_text(json.dumps({**marker, "binary": str(hung)}))
    report = tmp_path / "report.json"
    try:
        result = CliRunner().invoke(
            cli,
            ["verify", str(local_inventory), "--checks", "tmux", "--timeout", "3",
             "-e", f"__tmux_marker_dir={markers}", "--json", str(report)],
        )  # fmt: skip
    finally:
        if pid_file.exists():  # the task timeout ends Ansible's worker, not the probe
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert result.exit_code == 1, result.output
    found = {r["check"]: r for r in json.loads(report.read_text())["results"]}
    assert set(found) == {"tmux.version", "tmux.config", "tmux.linger", "tmux.logout_survival"}
    for check in found.values():
        assert check["status"] == "fail", check
        assert check["detail"].startswith("timed out after 3 s"), check
