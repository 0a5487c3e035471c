"""Fixtures shared by every tier."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def local_inventory(tmp_path: Path) -> Path:
    """An inventory whose one host is this machine, reached without SSH."""
    path = tmp_path / "local.ini"
    path.write_text(
        f"[nodes]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    return path
