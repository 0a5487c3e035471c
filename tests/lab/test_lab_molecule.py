"""Molecule's delegated driver on lab nodes: create, converge, idempotence, verify, destroy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeprep.lab import lifecycle

pytestmark = pytest.mark.lab
PROJECT = Path(__file__).with_name("molecule_project")


def test_molecule_scenario_runs_on_a_lab_node(
    tmp_path: Path, lab_cache: Path, saved_state_ready: str
) -> None:
    lab_dir = tmp_path / "lab"
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "NODEPREP_LAB_DIR": str(lab_dir),
        "NODEPREP_CACHE_DIR": str(lab_cache),
        "MOLECULE_NO_LOG": "false",
    }
    try:
        done = subprocess.run(
            [str(Path(bin_dir) / "molecule"), "test"],
            cwd=PROJECT, env=env, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-4000:]
        assert "idempotence" in output.lower()
        assert "molecule verify: the node holds the marker its converge wrote" in output
        # destroy ran last: the lab's qemu and files are gone.
        assert not lab_dir.exists()
    finally:
        lifecycle.down(lab_dir)
