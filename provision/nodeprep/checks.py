"""The check groups of ``nodeprep verify``, read from the one place they are declared.

``playbooks/vars/checks.yml`` says which role reports which groups; verify.yml loops over
it and this module gives the CLI the same list, so the two can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import yaml

from nodeprep import paths


@dataclass(frozen=True)
class CheckGroups:
    """The groups verify runs by default, and the drill group that needs --drill."""

    groups: tuple[str, ...]
    drill: str

    @property
    def known(self) -> tuple[str, ...]:
        return (*self.groups, self.drill)


@cache
def declared() -> CheckGroups:
    """The groups of playbooks/vars/checks.yml, in the order verify runs them."""
    data = yaml.safe_load(paths.checks_file().read_text(encoding="utf-8"))
    groups = tuple(group for entry in data["nodeprep_check_roles"] for group in entry["groups"])
    (drill,) = data["nodeprep_drill_role"]["groups"]
    return CheckGroups(groups=groups, drill=str(drill))
