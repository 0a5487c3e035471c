"""Every test in this tier runs against real lab VMs."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/lab/" in str(item.path):
            item.add_marker(pytest.mark.lab)
