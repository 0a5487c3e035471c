"""Which strategy the rollout play runs a batch under, as ansible-playbook decides it.

The rollout play's `strategy:` expression (playbooks/provision.yml) is run in a one-task play
by the real ansible-playbook against hosts on the local connection. The strategy the run asks
for (ANSIBLE_STRATEGY, as `--fast` sets it) is a name no plugin has here, so a batch that keeps
it fails with "Invalid play strategy specified: <name>", and one that gets Ansible's linear
strategy runs its task: the outcome names the strategy each case got.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nodeprep import paths

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ASKED = "nodeprep_asked_strategy"
ROLLOUT = "Roll out the disruptive roles in batches"


def rollout_strategy() -> str:
    plays = yaml.safe_load(paths.playbook("provision.yml").read_text())
    return next(play["strategy"] for play in plays if play["name"] == ROLLOUT)


def strategy_of(tmp_path: Path, *args: str) -> str:
    """The strategy the rollout play's expression picks for a run with ARGS."""
    (tmp_path / "hosts.ini").write_text("node1 ansible_connection=local\n")
    play = [{
        "name": ROLLOUT, "hosts": "all", "gather_facts": False,
        "strategy": rollout_strategy(),
        "tasks": [{"name": "Ran", "ansible.builtin.debug": {"msg": "ran"},
                   "tags": ["nic_bond", "volume_grow"]}],
    }]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_STRATEGY": ASKED, "ANSIBLE_PYTHON_INTERPRETER": sys.executable}
    env.pop("ANSIBLE_CONFIG", None)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "hosts.ini", "play.yml",
         *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    if f"Invalid play strategy specified: {ASKED}" in output:
        return ASKED
    assert done.returncode == 0, output
    assert '"msg": "ran"' in output, output
    return "linear"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), "linear"),  # ansible-playbook alone: a bond is assumed
        (("-e", "nodeprep_rollout_bonds=true"), "linear"),
        (("-e", "nodeprep_rollout_bonds=true", "--tags", "nic_bond"), "linear"),
        (("-e", "nodeprep_rollout_bonds=true", "--tags", "volume_grow"), ASKED),
        (("-e", "nodeprep_rollout_bonds=true", "--skip-tags", "nic_bond"), ASKED),
        (("-e", "nodeprep_rollout_bonds=false"), ASKED),  # no selected host has a bond
    ],
    ids=["unset", "bond", "tags-bond", "tags-volume", "skip-bond", "no-bond"],
)
def test_run_that_may_change_a_bond_is_linear(
    tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    assert strategy_of(tmp_path, *args) == expected
