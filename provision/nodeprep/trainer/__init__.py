"""The reference trainer built on nodeprep.checkpoint (``python -m nodeprep.trainer``)."""

from __future__ import annotations
