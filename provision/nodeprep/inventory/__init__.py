"""Load and validate an inventory with Ansible's own parser, before anything runs.

Ansible, left alone, turns an unparsable inventory into a warning and runs
against whatever it could read, or an implicit localhost. nodeprep refuses
instead, each time with one sentence naming the input and exit 2, within a
second and without connecting to any node:

- the file itself (:mod:`.source`): missing, not a regular file, over
  ``MAX_BYTES``, not UTF-8, a line over ``MAX_LINE_CHARS``, host ranges that
  expand past ``MAX_HOSTS``, a YAML alias bomb, an unclosed INI section;
- the parse (:mod:`.parse`): any plugin failure anywhere in the file, even
  when hosts before it were read, and an inventory without hosts;
- ``--limit`` (:mod:`.pattern`): any part that matches nothing or does not parse;
- the selected hosts (:mod:`.hosts`): unusable names, ports and addresses, and, when
  asked, role variables of a wrong type or value (:mod:`nodeprep.rolevars`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeprep import rolevars
from nodeprep.inventory import hosts as host_checks
from nodeprep.inventory import parse as ansible_parse
from nodeprep.inventory import pattern, source
from nodeprep.inventory.source import MAX_BYTES, MAX_HOSTS, MAX_LINE_CHARS

__all__ = ["MAX_BYTES", "MAX_HOSTS", "MAX_LINE_CHARS", "Inventory", "InventoryError", "load"]


# The host variable every lab node's inventory line carries (nodeprep.lab.inventory).
LAB_MARK = "nodeprep_lab_bond_nics"


class InventoryError(ValueError):
    """The inventory cannot be used; the message is one sentence naming the input and the fix."""


@dataclass(frozen=True)
class Inventory:
    """What nodeprep needs to know about a validated inventory."""

    source: Path
    hosts: tuple[str, ...]
    groups: dict[str, tuple[str, ...]]
    # The hosts chosen by the --limit given to load(); every host without one.
    selected: tuple[str, ...]
    # Hosts of a nodeprep lab (their inventory, from `nodeprep lab inventory`, says so).
    lab: frozenset[str] = frozenset()
    # Selected hosts whose inventory asks for a bond (nic_bond_members set, not empty; a
    # templated value counts as a bond, since only the play can render it).
    bonded: frozenset[str] = frozenset()


def load(
    path_like: str | os.PathLike[str],
    limit: str | None = None,
    role_vars_given: frozenset[str] | None = None,
) -> Inventory:
    """Guard, parse and select; :class:`InventoryError` for anything that must not run.

    With ROLE_VARS_GIVEN (the names -e sets, which win over the inventory's), the selected
    hosts' other role variables are checked against the roles' argument specs too.
    """
    path = Path(path_like)
    try:
        text = source.read_guarded(path)
        manager, hosts = _parsed(text)
        selected = pattern.select(manager, str(path), limit) if limit is not None else hosts
        variables = _check_hosts(manager, selected, role_vars_given)
    except rolevars.RoleVarError as exc:
        raise InventoryError(f"inventory {path}, {exc}") from None
    except (source.SourceError, pattern.PatternError) as exc:
        raise InventoryError(str(exc)) from None
    except host_checks.HostValueError as exc:
        raise InventoryError(f"inventory {path}: {exc}") from None
    groups = {
        name: tuple(sorted(h.name for h in group.get_hosts()))
        for name, group in manager.groups.items()
        if name not in ("all", "ungrouped")
    }
    lab = frozenset(
        name
        for name in hosts
        if (host := manager.get_host(name)) is not None and LAB_MARK in host.get_vars()
    )
    bonded = frozenset(name for name, found in variables.items() if found.get("nic_bond_members"))
    return Inventory(source=path.resolve(), hosts=hosts, groups=groups, selected=selected, lab=lab,
                     bonded=bonded)  # fmt: skip


def _parsed(text: source.InventoryText) -> tuple[Any, tuple[str, ...]]:
    path, plugin = text.path, text.plugin
    manager, problems = ansible_parse.parse(path, plugin is not None)
    if problems and plugin is not None:
        raise InventoryError(
            f"inventory {path}: the {plugin} inventory plugin failed ({problems[0]}); fix its "
            "settings there (plugin name, filters, regions, credentials)."
        )
    if problems:
        raise InventoryError(
            f"inventory {path}{ansible_parse.locate(text.text, problems[0])} could not be "
            f"parsed ({problems[0]}); fix the INI or YAML syntax there."
        )
    hosts = tuple(sorted(host.name for host in manager.get_hosts(ignore_restrictions=True)))
    if not hosts and plugin is not None:
        raise InventoryError(
            f"inventory {path}: the {plugin} inventory plugin found no hosts; check its filters "
            "and regions, and that its credentials see the fleet."
        )
    if not hosts:
        raise InventoryError(
            f"inventory {path} defines no hosts; add at least one host line (e.g. 'node1 "
            "ansible_host=10.0.0.5') to it."
        )
    if len(hosts) > MAX_HOSTS:
        raise InventoryError(
            f"inventory {path} defines {len(hosts)} hosts, more than {MAX_HOSTS}; "
            "split the fleet into several inventories."
        )
    return manager, hosts


def _check_hosts(
    manager: Any, selected: tuple[str, ...], role_vars_given: frozenset[str] | None
) -> dict[str, dict[str, Any]]:
    """Each selected host's variables, once its name, connection values and (when asked)
    role variables passed their checks."""
    for name in selected:
        host_checks.check_name(name)
    found = ansible_parse.variables_of(manager, selected)
    for name, variables in found.items():
        host_checks.check_connection_values(name, variables)
        if role_vars_given is not None:
            mine = {k: v for k, v in variables.items() if k not in role_vars_given}
            rolevars.check(mine, f"host {name}")
    return found
