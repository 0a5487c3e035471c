"""Helpers for the tmux role's lab tests: run a role through nodeprep's runner on a lab node."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab_helpers import LabNode

from nodeprep import runner

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
    outcomes: list[tuple[str, str]] = field(default_factory=list)

    def outcome(self, task: str) -> str | None:
        """The last outcome of a task on the node, or None when it never ran."""
        found = [outcome for name, outcome in self.outcomes if name == task]
        return found[-1] if found else None

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


def run_play(text: str, inventory_path: Path, extra_vars: dict[str, Any], tmp: Path) -> Run:
    """Write the playbook into a fresh directory and run it as `nodeprep provision` would."""
    tmp.mkdir(parents=True, exist_ok=True)
    playbook = tmp / "play.yml"
    playbook.write_text(text)
    run = Run(result=runner.RunResult("", 1, {}, []))

    def record(item: runner.Progress) -> None:
        if item.host is not None and item.outcome is not None:
            run.outcomes.append((item.task, item.outcome))

    request = runner.RunRequest(playbook=playbook, inventory=inventory_path, extra_vars=extra_vars)
    run.result = runner.run(request, on_progress=record)
    return run
