"""Load and validate an inventory with Ansible's own parser, before anything runs.

Ansible, left alone, turns an unparsable inventory into a warning and runs
against an implicit localhost. nodeprep refuses instead: a missing file, a
file no inventory plugin can read, an inventory without hosts and a
``--limit`` that matches nothing are all bad input (exit 2, nothing run).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class InventoryError(ValueError):
    """The inventory cannot be used; the message is one sentence naming the input and the fix."""


@dataclass(frozen=True)
class Inventory:
    """What nodeprep needs to know about a validated inventory."""

    source: Path
    hosts: tuple[str, ...]
    groups: dict[str, tuple[str, ...]]

    def select(self, limit: str | None) -> tuple[str, ...]:
        return self.hosts if not limit else _matching_hosts(self.source, limit)


def load(source: str | os.PathLike[str], limit: str | None = None) -> Inventory:
    """Parse ``source`` with Ansible's inventory plugins and check ``limit`` matches hosts."""
    path = Path(source)
    if not path.exists():
        raise InventoryError(
            f"inventory {path} does not exist; pass the path of an INI or YAML inventory file."
        )
    manager, problems = _parse(path)
    hosts = tuple(sorted(host.name for host in manager.get_hosts(ignore_restrictions=True)))
    if problems and not hosts:
        raise InventoryError(
            f"inventory {path}{_locate(path, problems[0])} could not be parsed ({problems[0]}); "
            "fix the INI or YAML syntax there."
        )
    if not hosts:
        raise InventoryError(
            f"inventory {path} defines no hosts; add at least one host line (e.g. 'node1 "
            "ansible_host=10.0.0.5') to it."
        )
    groups = {
        name: tuple(sorted(h.name for h in group.get_hosts()))
        for name, group in manager.groups.items()
        if name not in ("all", "ungrouped")
    }
    inventory = Inventory(source=path.resolve(), hosts=hosts, groups=groups)
    if limit:
        inventory.select(limit)
    return inventory


def _matching_hosts(source: Path, limit: str) -> tuple[str, ...]:
    manager, _ = _parse(source)
    try:
        with _captured_inventory_warnings():
            manager.subset(limit)
            matched = manager.get_hosts()
    except Exception as exc:  # Ansible raises its own error types for bad patterns
        raise InventoryError(f"--limit {limit!r} is not a valid host pattern: {exc}") from exc
    if not matched:
        raise InventoryError(
            f"--limit {limit!r} matches no host in {source}; use a host or group name from it "
            "(nodeprep provision INVENTORY --list-hosts shows them)."
        )
    return tuple(sorted(host.name for host in matched))


def _parse(path: Path) -> tuple[Any, list[str]]:
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    with _captured_inventory_warnings() as problems:
        manager = InventoryManager(loader=DataLoader(), sources=[str(path)])
    return manager, _most_specific_first(path, problems)


@contextlib.contextmanager
def _captured_inventory_warnings() -> Iterator[list[str]]:
    """Collect the parser's warnings instead of letting Ansible print them."""
    from ansible.inventory import manager as inventory_manager

    display = inventory_manager.display
    captured: list[str] = []
    saved = {name: getattr(display, name) for name in ("warning", "error_as_warning")}

    def warning(msg: str, *args: Any, **kwargs: Any) -> None:
        captured.append(str(msg))

    def error_as_warning(
        msg: str | None = None, exception: BaseException | None = None, **kwargs: Any
    ) -> None:
        captured.append(f"{msg} {_first_line(exception)}".strip())

    display.warning = warning
    display.error_as_warning = error_as_warning
    try:
        yield captured
    finally:
        for name, method in saved.items():
            setattr(display, name, method)


def _first_line(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    text = getattr(exc, "message", None) or str(exc)
    return str(text).strip().splitlines()[0] if str(text).strip() else type(exc).__name__


def _most_specific_first(path: Path, problems: list[str]) -> list[str]:
    """Put the plugin failure that matches the file's kind first (ini for .ini, yaml for .yml)."""
    preferred = "'yaml'" if path.suffix in (".yml", ".yaml", ".json") else "'ini'"
    details = [p for p in problems if p.startswith("Failed to parse inventory with")]
    ordered = sorted(details, key=lambda p: preferred not in p)
    cleaned = [
        p.split("plugin.", 1)[-1].strip().removeprefix("Failed to parse inventory: ")
        for p in ordered
    ]
    return [c for c in cleaned if c] or problems


def _locate(path: Path, problem: str) -> str:
    """``:LINE`` of the offending text when the parser quoted it, else nothing."""
    quoted = re.search(r"got: (.+)$", problem)
    if not quoted:
        return ""
    needle = quoted.group(1).strip()
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if needle in line:
            return f":{number}"
    return ""
