"""``--limit`` patterns: every part must parse and match, or nothing runs.

Ansible, given a pattern part it cannot match (``~[(``, ``host[12``, a typo in
``a,b``), warns "Could not match supplied host pattern, ignoring" and goes on
with the other parts; a part that is a broken subscript can leave the whole
inventory selected. nodeprep refuses the pattern instead, naming the part.
"""

from __future__ import annotations

from typing import Any

from nodeprep.inventory.parse import captured_display

_NO_MATCH = "Could not match supplied host pattern, ignoring:"


class PatternError(ValueError):
    """The pattern selects nothing or does not parse; the message names it and the fix."""


def select(manager: Any, source: str, limit: str) -> tuple[str, ...]:
    """The hosts ``limit`` selects; :class:`PatternError` unless every part of it matches."""
    if not limit.strip():
        raise PatternError(
            "--limit '' is empty; give a host or group name, or leave --limit out for every host."
        )
    try:
        with captured_display() as captured:
            manager.subset(limit)
            matched = manager.get_hosts()
    except Exception as exc:  # Ansible raises its own error types for bad patterns
        raise PatternError(f"--limit {limit!r} is not a valid host pattern: {exc}") from exc
    finally:
        manager.subset(None)
    unmatched = [w.split(_NO_MATCH, 1)[1].strip() for w in captured.warnings if _NO_MATCH in w]
    if unmatched and unmatched != [limit.strip()]:
        parts = ", ".join(repr(part) for part in unmatched)
        which = f"the part {parts} matches" if len(unmatched) == 1 else f"the parts {parts} match"
        raise PatternError(
            f"--limit {limit!r}: {which} no host in {source} or does not parse; use host or "
            "group names from it (--list-hosts shows them)."
        )
    if unmatched or not matched:
        raise PatternError(
            f"--limit {limit!r} matches no host in {source}; use a host or group name from it "
            "(nodeprep provision INVENTORY --list-hosts shows them)."
        )
    return tuple(sorted(host.name for host in matched))
