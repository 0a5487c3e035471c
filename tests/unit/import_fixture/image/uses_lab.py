"""Deliberately wrong: the product importing its test bed."""

from __future__ import annotations

from nodeprep.lab.errors import LabError

__all__ = ["LabError"]
