"""Helpers for the tmux role's lab tests: run a role through nodeprep's runner on a lab node."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab_helpers import LabNode

from nodeprep import runner
from nspawn_node import Container

CONVERGE = """\
- name: Converge the tmux role
  hosts: all
  become: true
  gather_facts: false
  roles:
    - role: tmux
"""
VERIFY = """\
- name: Verify the tmux role
  hosts: all
  become: true
  gather_facts: false
  tasks:
    - name: Run the tmux checks
      ansible.builtin.include_role:
        name: tmux
        tasks_from: verify
"""


@dataclass
class Run:
    """One playbook run: the runner's result plus each task's outcome, in order."""

    result: runner.RunResult
    outcomes: list[tuple[str, str, str]] = field(default_factory=list)  # host, task, outcome

    def changed_on(self, host: str) -> int:
        return self.result.recap[host].changed

    @property
    def changed(self) -> int:
        return sum(recap.changed for recap in self.result.recap.values())

    def messages(self) -> str:
        return " ".join(failure.message for failure in self.result.failures)

    def checks(self) -> dict[str, dict[str, Any]]:
        return {str(item["check"]): item for item in self.result.results}


def inventory(node: LabNode, tmp_path: Path) -> Path:
    written = node.cli("inventory", "--output", str(tmp_path / "lab.ini"))
    assert written.returncode == 0, written.stderr
    return Path(written.stdout.strip())


def with_build_node(lab_ini: Path, builder: Container, tmp_path: Path) -> Path:
    """The lab inventory with a build node first in [lab]: a container of the VM's release.

    The container runs natively (a compile takes a couple of minutes instead of the better
    part of an hour under TCG) and reports the same distribution, release and architecture
    as the lab VM, so the role puts both in one build group and the VM unpacks its build.
    It is root already and has no sudo, hence ansible_become=false on that line only, and
    its fresh root has no apt lists yet, hence tmux_apt_update_cache=true; tmux_build_node
    makes it the group's builder.
    """
    shim = builder.chroot_shim(tmp_path / "enter-build-node")
    line = (
        f"builder ansible_connection=community.general.chroot ansible_host={builder.root} "
        f"ansible_chroot_exe={shim} ansible_python_interpreter=/usr/bin/python3 "
        "ansible_become=false tmux_apt_update_cache=true tmux_build_node=true"
    )
    text = lab_ini.read_text()
    assert "[lab]\n" in text, text
    path = tmp_path / "fleet.ini"
    path.write_text(text.replace("[lab]\n", f"[lab]\n{line}\n", 1))
    return path


def run_play(
    text: str, inventory_path: Path, extra_vars: dict[str, Any], tmp: Path, fast: bool = False
) -> Run:
    """Write the playbook into a fresh directory and run it as `nodeprep provision` would
    (with ``fast``, as `nodeprep provision --fast` would: the mitogen strategy)."""
    tmp.mkdir(parents=True, exist_ok=True)
    playbook = tmp / "play.yml"
    playbook.write_text(text)
    run = Run(result=runner.RunResult("", 1, {}, []))

    def record(item: runner.Progress) -> None:
        if item.host is not None and item.outcome is not None:
            run.outcomes.append((item.host, item.task, item.outcome))

    request = runner.RunRequest(
        playbook=playbook, inventory=inventory_path, extra_vars=extra_vars, fast=fast
    )
    run.result = runner.run(request, on_progress=record)
    return run
