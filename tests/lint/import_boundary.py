"""The import rules of ARCHITECTURE.md, checked over the import graph (run in the lint tier).

- The node side (what is deployed onto nodes and into the image) never imports the
  controller side: a trainer or watchdog that needs ansible-runner or click cannot run there.
- Nothing but the lab (and its command) imports the lab: the product does not depend on its
  test bed.

Usage: python tests/lint/import_boundary.py PACKAGE_DIR [PACKAGE_DIR ...]; exit 1 with one
line per violation, 0 when there is none.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

NODE_SIDE = ("checkpoint", "trainer", "data", "heartbeat", "smoke", "contract", "progress",
             "interconnect")  # fmt: skip
CONTROLLER_SIDE = (
    "cli", "runner", "inventory", "report", "rollout", "image", "lab", "wheel", "paths",
    "checks", "textfile", "debmirror",
)  # fmt: skip
LAB_USERS = ("lab", "cli.lab")


def _part(module: str) -> str:
    """``nodeprep.x.y`` -> ``x``; anything outside nodeprep -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "nodeprep" else ""


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every nodeprep import in the file, including function-level ones."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            if node.module == "nodeprep":
                found += [(node.lineno, f"nodeprep.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name.startswith("nodeprep.")]


def violations(package: Path) -> list[str]:
    """One line per import that breaks a rule, for every .py file under ``package``."""
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).with_suffix("")
        here = ".".join(relative.parts).removesuffix(".__init__")
        side = here.split(".", 1)[0]
        for line, module in imported(path):
            target = _part(module)
            if side in NODE_SIDE and target in CONTROLLER_SIDE:
                found.append(f"{path}:{line}: node-side {here} imports controller-side {module}")
            if target == "lab" and not here.startswith(LAB_USERS):
                found.append(f"{path}:{line}: {here} imports the test bed {module}")
    return found


def main(argv: list[str]) -> int:
    problems = [line for package in argv for line in violations(Path(package))]
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
