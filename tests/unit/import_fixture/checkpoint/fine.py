"""Allowed: node-side code importing the contract and its own package."""

from __future__ import annotations

from nodeprep import contract
from nodeprep.checkpoint import manifest

__all__ = ["contract", "manifest"]
