"""Compare release versions and read the upstream part of a distribution's package version.

Standard library and Python 3.8 only: this runs on the nodes as Ansible module_utils.
"""

from __future__ import annotations

import re
from typing import Any, List, Tuple

VersionKey = List[Tuple[int, Any]]  # a runtime alias: Python 3.8 on nodes


def loose_version(text: str) -> VersionKey:
    """A comparable form of a version like 3.5a (numbers compare as numbers, letters after)."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.findall(r"\d+|[a-z]+", text.lower())]


def upstream_version(package_version: str) -> str:
    """The upstream release in a Debian package version: 1:3.5a-3+deb13u1 -> 3.5a.

    Debian's form is [epoch:]upstream[-revision]; the revision is after the last hyphen.
    Repackaging suffixes (+dfsg, +ds, ~bpo) belong to the distribution, not the release.
    """
    text = package_version.strip().split(":", 1)[-1]
    if "-" in text:
        text = text.rsplit("-", 1)[0]
    return re.split(r"[+~]", text, maxsplit=1)[0]
