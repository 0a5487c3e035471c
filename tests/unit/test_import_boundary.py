"""The import-boundary check finds a deliberately wrong import and passes on the package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tests" / "lint" / "import_boundary.py"
FIXTURE = Path(__file__).parent / "import_fixture"


def check(package: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKER), str(package)], capture_output=True, text=True, check=False
    )


def test_the_package_keeps_the_rules() -> None:
    done = check(ROOT / "provision" / "nodeprep")
    assert (done.returncode, done.stdout) == (0, "")


def test_wrong_imports_are_named_line_by_line() -> None:
    done = check(FIXTURE)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"{FIXTURE / 'checkpoint' / 'leaks.py'}:7: node-side checkpoint.leaks imports "
        "controller-side nodeprep.runner",
        f"{FIXTURE / 'image' / 'uses_lab.py'}:5: image.uses_lab imports the test bed "
        "nodeprep.lab.errors",
    ]
