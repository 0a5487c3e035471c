"""Find the Debian mirror this host already uses, so image builds go where apt goes.

Machines that build images often reach Debian only through an internal mirror; reading the
host's apt sources keeps the trainer image build (and the lab) working there without
configuration. Both import this module: the product never depends on its test bed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

APT_SOURCES = Path("/etc/apt/sources.list")
APT_SOURCES_DIR = Path("/etc/apt/sources.list.d")
# NODEPREP_LAB_MIRROR is the name this setting had when only the lab used it.
MIRROR_VARIABLES = ("NODEPREP_DEBIAN_MIRROR", "NODEPREP_LAB_MIRROR")
_ONE_LINE = re.compile(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)")


class MirrorNotFoundError(ValueError):
    """No Debian mirror is configured or found; the message says how to name one."""


def _one_line_uris(text: str) -> Iterable[tuple[str, str]]:
    for line in text.splitlines():
        match = _ONE_LINE.match(line)
        if match:
            yield match.group(1), match.group(2)


def _deb822_uris(text: str) -> Iterable[tuple[str, str]]:
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled") == "no":
            continue
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                yield uri, suite


def mirror_from_sources(main: Path, parts: Path) -> str | None:
    """The first Debian archive URI (not the security archive) among the apt sources."""
    found: list[tuple[str, str]] = []
    if main.is_file():
        found.extend(_one_line_uris(main.read_text(errors="replace")))
    if parts.is_dir():
        for path in sorted(parts.iterdir()):
            if path.suffix == ".list":
                found.extend(_one_line_uris(path.read_text(errors="replace")))
            elif path.suffix == ".sources":
                found.extend(_deb822_uris(path.read_text(errors="replace")))
    for uri, suite in found:
        if "security" not in uri and "security" not in suite and "/debian" in uri:
            return uri.rstrip("/")
    return None


def debian_mirror() -> str:
    """$NODEPREP_DEBIAN_MIRROR, else the host's apt mirror; a clear error when neither exists."""
    for variable in MIRROR_VARIABLES:
        explicit = os.environ.get(variable)
        if explicit:
            return explicit.rstrip("/")
    found = mirror_from_sources(APT_SOURCES, APT_SOURCES_DIR)
    if found is None:
        raise MirrorNotFoundError(
            "No Debian mirror was found in /etc/apt/sources.list*; "
            "set NODEPREP_DEBIAN_MIRROR to a Debian archive URL and run again."
        )
    return found
