"""Error types of the lab, so the CLI can map them to exit codes without string matching."""

from __future__ import annotations


class LabError(RuntimeError):
    """Something the lab tried failed (a build, a boot, a QMP command); exit code 1."""


class LabInputError(LabError):
    """The user asked for something that cannot be done as given; exit code 2, nothing changed."""
