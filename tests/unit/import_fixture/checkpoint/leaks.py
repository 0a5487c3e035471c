"""Deliberately wrong: node-side code importing the controller's runner."""

from __future__ import annotations


def run_from_a_node() -> object:
    from nodeprep import runner

    return runner
