"""The processes under a PID the test started, read from /proc, to end them by PID."""

from __future__ import annotations

from pathlib import Path


def descendants(pid: int) -> list[int]:
    """PID's children, grandchildren and so on, each one after its own descendants."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found += [*descendants(child), child]
    return found
