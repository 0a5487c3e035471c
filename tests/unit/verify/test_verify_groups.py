"""`--checks GROUP` must run the role that reports GROUP.* and then show those checks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeprep.cli.errors import BadInput
from nodeprep.cli.verify import DRILL_GROUP, GROUPS, parse_checks

ROOT = Path(__file__).resolve().parents[3]
CHECK_NAME = re.compile(r'check: "?([a-z_]+)\.')


def verify_play_roles() -> list[dict[str, Any]]:
    play = yaml.safe_load((ROOT / "playbooks" / "verify.yml").read_text())[0]
    task = next(t for t in play["tasks"] if "loop" in t and "include_tasks" in str(t))
    return list(task["loop"])


def test_cli_groups_are_the_playbooks_groups() -> None:
    play = yaml.safe_load((ROOT / "playbooks" / "verify.yml").read_text())[0]
    from_roles = [group for entry in verify_play_roles() for group in entry["groups"]]
    assert sorted(from_roles) == sorted(GROUPS)
    assert sorted(play["vars"]["verify_groups"]) == sorted(GROUPS)


@pytest.mark.parametrize("entry", verify_play_roles(), ids=lambda e: str(e["role"]))
def test_each_role_names_its_checks_after_its_groups(entry: dict[str, Any]) -> None:
    tasks = ROOT / "roles" / str(entry["role"]) / "tasks"
    prefixes = {m for path in tasks.glob("*.yml") for m in CHECK_NAME.findall(path.read_text())}
    assert prefixes - {DRILL_GROUP} == set(entry["groups"]), tasks


@pytest.mark.parametrize("group", GROUPS)
def test_a_group_and_its_full_check_names_are_accepted(group: str) -> None:
    assert parse_checks((group,))[1] == [group]
    assert parse_checks((f"{group}.anything",))[1] == [group]


def test_an_unknown_group_is_refused() -> None:
    with pytest.raises(BadInput, match="--checks 'bond' names no check group"):
        parse_checks(("bond",))
