"""Which strategy the rollout play runs under, as ansible-playbook decides it.

The rollout play's `strategy:` expression (playbooks/provision.yml) is run in a one-task play
by the real ansible-playbook against a host on the local connection. The strategy the run asks
for (ANSIBLE_STRATEGY, as `--fast` sets it to mitogen_linear) is a name no plugin has here, so
the run fails with "Invalid play strategy specified: <name>", and that name is the strategy
the play chose: the asked one, or the asked one without its mitogen_ prefix. Asked for
mitogen_linear, the play runs its task under Ansible's linear strategy.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nodeprep import paths

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MITOGEN = "mitogen_nodeprep_asked"  # stands for mitogen_linear, mitogen_free, ...
OWN = "nodeprep_asked"  # what the play makes of it: mitogen left out
ROLLOUT = "Roll out the disruptive roles in batches"


def rollout_strategy() -> str:
    plays = yaml.safe_load(paths.playbook("provision.yml").read_text())
    return next(play["strategy"] for play in plays if play["name"] == ROLLOUT)


def strategy_of(tmp_path: Path, asked: str, *args: str) -> str:
    """The strategy the rollout play's expression picks when ASKED is asked, with ARGS."""
    (tmp_path / "hosts.ini").write_text("node1 ansible_connection=local\n")
    play = [{
        "name": ROLLOUT, "hosts": "all", "gather_facts": False,
        "strategy": rollout_strategy(),
        "tasks": [{"name": "Ran", "ansible.builtin.debug": {"msg": "ran"},
                   "tags": ["nic_bond", "volume_grow"]}],
    }]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_STRATEGY": asked, "ANSIBLE_PYTHON_INTERPRETER": sys.executable}
    env.pop("ANSIBLE_CONFIG", None)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "hosts.ini", "play.yml",
         *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    if done.returncode == 0 and '"msg": "ran"' in output:
        return "ran"  # a strategy that exists here
    chosen = re.search(r"Invalid play strategy specified: (\S+)", output)
    assert chosen, output
    return chosen.group(1)


BONDS = ("-e", "nodeprep_rollout_bonds=true")
IDS = ["unset", "bond", "tags-bond", "tags-apply", "tagged", "tags-volume", "tags-plan",
       "skip-bond", "skip-apply", "check", "no-bond", "users-own", "fast"]  # fmt: skip


@pytest.mark.parametrize(
    ("asked", "args", "expected"),
    [
        (MITOGEN, (), OWN),  # ansible-playbook alone: a bond is assumed
        (MITOGEN, BONDS, OWN),
        (MITOGEN, (*BONDS, "--tags", "nic_bond"), OWN),
        (MITOGEN, (*BONDS, "--tags", "nic_bond_apply"), OWN),  # the role's own tag
        (MITOGEN, (*BONDS, "--tags", "tagged"), OWN),
        (MITOGEN, (*BONDS, "--tags", "volume_grow"), MITOGEN),  # the bond is left out
        (MITOGEN, (*BONDS, "--tags", "nic_bond_plan"), MITOGEN),  # plans, activates nothing
        (MITOGEN, (*BONDS, "--skip-tags", "nic_bond"), MITOGEN),
        (MITOGEN, (*BONDS, "--skip-tags", "nic_bond_apply"), MITOGEN),
        (MITOGEN, (*BONDS, "--check"), MITOGEN),  # check mode activates nothing
        (MITOGEN, ("-e", "nodeprep_rollout_bonds=false"), MITOGEN),  # no host has a bond
        ("nodeprep_users_own", BONDS, "nodeprep_users_own"),  # not mitogen: it stays
        ("mitogen_linear", BONDS, "ran"),  # as --fast asks: Ansible's linear runs the task
    ],
    ids=IDS,
)
def test_run_that_may_activate_a_bond_leaves_mitogen_out(
    tmp_path: Path, asked: str, args: tuple[str, ...], expected: str
) -> None:
    assert strategy_of(tmp_path, asked, *args) == expected
