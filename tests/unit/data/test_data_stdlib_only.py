"""nodeprep.data imports nothing but the standard library and itself.

It is shipped as Ansible module_utils to nodes that have only python3; one
``import requests`` would work here and fail there, on every node at once.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import nodeprep.data

PACKAGE = Path(nodeprep.data.__file__).parent


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


def test_only_the_standard_library_and_the_package_itself_are_imported() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    outside = [
        f"{path.name} imports {name}"
        for path in modules
        for name in _imports(path)
        if name.split(".")[0] not in sys.stdlib_module_names
        and name != "__future__"
        and not name.startswith("nodeprep.data")
    ]

    assert len(modules) >= 8
    assert outside == []
