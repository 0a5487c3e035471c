"""Ansible's own inventory parser, with its warnings captured instead of printed.

Ansible turns a source no plugin can read into a warning and goes on with
whatever hosts the plugin added before it stopped (or an implicit localhost).
Here every plugin failure is collected so that the caller can refuse the whole
file, naming the line where the parser quoted it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Warnings that mean a source (or part of one) was not parsed; others are advice.
_PARSE_FAILURE_RE = re.compile(r"unable to parse|failed to parse|skipping due to errors", re.I)


@dataclass
class Captured:
    """What Ansible's display said while nodeprep had it muted."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def parse_failures(self) -> list[str]:
        return self.errors + [w for w in self.warnings if _PARSE_FAILURE_RE.search(w)]


def _collection_loader() -> None:
    """Let this process load collection plugins (amazon.aws.aws_ec2 and other dynamic
    inventories), as ansible-playbook's CLI does before it reads an inventory; once."""
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader()


def parse(path: Path, plugin: bool = False) -> tuple[Any, list[str]]:
    """An InventoryManager over ``path`` and its parse failures, most specific first
    (PLUGIN: the file is a plugin config, whose failures the 'auto' plugin reports)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    _collection_loader()
    with captured_display() as captured:
        manager = InventoryManager(loader=DataLoader(), sources=[str(path)])
    return manager, most_specific_first(path, captured.parse_failures(), plugin)


def variables_of(manager: Any, names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Each host's variables as a play would see them (group_vars and host_vars included)."""
    from ansible.vars.manager import VariableManager

    variable_manager = VariableManager(loader=manager._loader, inventory=manager)
    found: dict[str, dict[str, Any]] = {}
    with captured_display():
        for name in names:
            host = manager.get_host(name)
            found[name] = variable_manager.get_vars(host=host, include_hostvars=False)
    return found


@contextlib.contextmanager
def captured_display() -> Iterator[Captured]:
    """Collect the parser's warnings and errors instead of letting Ansible print them."""
    from ansible.inventory import manager as inventory_manager

    display = inventory_manager.display
    captured = Captured()
    saved = {name: getattr(display, name) for name in ("warning", "error_as_warning", "deprecated")}

    def warning(msg: str, *args: Any, **kwargs: Any) -> None:
        captured.warnings.append(str(msg))

    def error_as_warning(
        msg: str | None = None, exception: BaseException | None = None, **kwargs: Any
    ) -> None:
        captured.errors.append(f"{msg} {_first_line(exception)}".strip())

    display.warning = warning
    display.error_as_warning = error_as_warning
    display.deprecated = warning  # a plugin's deprecation notice (amazon.aws has some) is advice
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


def most_specific_first(path: Path, problems: list[str], plugin: bool = False) -> list[str]:
    """Put the plugin failure that matches the file's kind first (ini for .ini, yaml for .yml,
    auto for a plugin config such as an aws_ec2 file)."""
    preferred = (
        "'auto'" if plugin else "'yaml'" if path.suffix in (".yml", ".yaml", ".json") else "'ini'"
    )
    details = [p for p in problems if p.startswith("Failed to parse inventory with")]
    ordered = sorted(details, key=lambda p: preferred not in p)
    cleaned = [
        p.split("plugin.", 1)[-1].strip().removeprefix("Failed to parse inventory: ")
        for p in ordered
    ]
    return [c for c in cleaned if c] or problems


def locate(text: str, problem: str) -> str:
    """``:LINE`` of the offending text when the parser quoted it, else nothing."""
    quoted = re.search(r"got: (.+)$", problem)
    if not quoted:
        return ""
    needle = quoted.group(1).strip()
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return f":{number}"
    return ""
