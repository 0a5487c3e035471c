"""Error types of image builds, so the CLI maps them to exit codes without string matching."""

from __future__ import annotations


class ImageError(RuntimeError):
    """A build step failed (the wheel, apptainer, the runtime set-up); exit code 1."""


class ImageInputError(ImageError):
    """An input cannot be used as given (base, wheelhouse, output path); exit code 2."""
