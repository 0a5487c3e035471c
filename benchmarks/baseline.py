"""Run an earlier commit's nodeprep beside this checkout's, for before/after benchmarks.

``checkout(REF)`` makes a temporary git worktree of REF; ``Nodeprep(root)`` is the command
line of the nodeprep in ROOT (its package put first on PYTHONPATH, so its roles, playbooks
and ansible.cfg are the ones used) or, without ROOT, of this checkout. Both run in this
virtual environment, so only nodeprep's own code differs between the two.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_MAIN = "import sys; from nodeprep.cli import main; sys.exit(main())"


@dataclass(frozen=True)
class Nodeprep:
    """One nodeprep to run: this checkout's (root None) or the one in ROOT."""

    label: str
    root: Path | None = None

    def argv(self, *args: str) -> list[str]:
        if self.root is None:
            return [str(Path(sys.executable).with_name("nodeprep")), *args]
        return [sys.executable, "-c", _MAIN, *args]

    def env(self) -> dict[str, str]:
        if self.root is None:
            return dict(os.environ)
        return {**os.environ, "PYTHONPATH": str(self.root / "provision")}


@contextmanager
def checkout(ref: str) -> Iterator[Path]:
    """A detached worktree of REF, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="nodeprep-baseline-") as parent:
        root = Path(parent) / "tree"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(root), ref],
            check=True,
        )
        try:
            yield root
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(root)], check=False
            )
