"""The nodeprep command line (the main group is assembled by the integrating branch)."""

from __future__ import annotations
