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
    # heartbeat_cloud=none: this machine's DMI may name a cloud, and the heartbeat role's probe
    # plan would then ask the real metadata address; tests speak only to 127.0.0.1.
    path.write_text(
        f"[nodes]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}"
        " heartbeat_cloud=none\n"
    )
    return path
