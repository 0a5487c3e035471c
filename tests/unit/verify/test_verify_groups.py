"""`--checks GROUP` must run the role that reports GROUP.* and then show those checks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeprep import checks, paths
from nodeprep.cli.errors import BadInput
from nodeprep.cli.verify import parse_checks

ROOT = Path(__file__).resolve().parents[3]
CHECK_NAME = re.compile(r'check: "?([a-z_]+)\.')
GROUPS = checks.declared().groups
DRILL_GROUP = checks.declared().drill


def verify_play_roles() -> list[dict[str, Any]]:
    data = yaml.safe_load(paths.checks_file().read_text())
    return [*data["nodeprep_check_roles"], data["nodeprep_drill_role"]]


def test_the_playbook_reads_the_one_declaration() -> None:
    play = yaml.safe_load((ROOT / "playbooks" / "verify.yml").read_text())[0]
    assert play["vars_files"] == ["vars/checks.yml"]
    assert GROUPS == ("preflight", "tmux", "nic_bond", "apptainer", "volume_grow", "heartbeat",
                      "dataset", "smoke", "disk", "checkpoint", "gpu", "interconnect")  # fmt: skip
    assert DRILL_GROUP == "drill"


@pytest.mark.parametrize("entry", verify_play_roles(), ids=lambda e: str(e["role"]))
def test_each_role_names_its_checks_after_its_groups(entry: dict[str, Any]) -> None:
    tasks = ROOT / "roles" / str(entry["role"]) / "tasks"
    prefixes = {m for path in tasks.glob("*.yml") for m in CHECK_NAME.findall(path.read_text())}
    if entry["groups"] == [DRILL_GROUP]:  # smoke's drill tasks sit beside its verify tasks
        assert DRILL_GROUP in prefixes, tasks
    else:
        assert prefixes - {DRILL_GROUP} == set(entry["groups"]), tasks


@pytest.mark.parametrize("group", GROUPS)
def test_a_group_and_its_full_check_names_are_accepted(group: str) -> None:
    assert parse_checks((group,))[1] == [group]
    assert parse_checks((f"{group}.anything",))[1] == [group]


def test_an_unknown_group_is_refused() -> None:
    with pytest.raises(BadInput, match="--checks 'bond' names no check group"):
        parse_checks(("bond",))
