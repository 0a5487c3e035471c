"""nodeprep: harden Linux machines for long AI training runs, and prove the result."""

from __future__ import annotations

__version__ = "0.1.0"
