"""Where the lab keeps running state and cached images.

Running state (overlays, sockets, PIDs) is per lab and disposable; the image cache is
shared by all labs of a user and survives `lab down`, because a cold build takes minutes.
"""

from __future__ import annotations

import os
from pathlib import Path


def lab_dir() -> Path:
    """The running lab's directory: $NODEPREP_LAB_DIR or ~/.local/state/nodeprep/lab."""
    explicit = os.environ.get("NODEPREP_LAB_DIR")
    if explicit:
        return Path(explicit).expanduser()
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "nodeprep" / "lab"


def cache_dir() -> Path:
    """The image cache: $NODEPREP_CACHE_DIR or ~/.cache/nodeprep/lab."""
    explicit = os.environ.get("NODEPREP_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "nodeprep" / "lab"
