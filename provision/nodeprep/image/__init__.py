"""The trainer image: its definition and content hash, the spython-driven build, and the
apptainer runtime on the build machine (controller side; nodes only run the image)."""

from __future__ import annotations
