"""A role's applied marker: what a converge recorded for ``nodeprep verify`` to check against.

One path rule, ``<directory>/<role>.json`` (``/etc/nodeprep/roles`` unless a role's tests
move it), and one reader that tells the three ways a marker can be missing apart: absent
(the role was not applied: its checks skip), unreadable and corrupt (the checks have no
evidence: they fail and say which). Writes are atomic and durable (temporary file, fsync,
rename, fsync of the directory), so a node that loses power mid-write keeps the old marker
or the new one, never half of one.

Standard library and Python 3.8 only: this runs on the nodes as Ansible module_utils.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any

MARKER_DIR = "/etc/nodeprep/roles"
_ROLE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")

PRESENT, ABSENT, UNREADABLE, CORRUPT = "present", "absent", "unreadable", "corrupt"


def marker_path(role: str, directory: str = MARKER_DIR) -> str:
    """The marker file of ROLE; raises ValueError for a name that is not a role name."""
    if not _ROLE.match(role):
        raise ValueError(f"{role!r} is not a role name (lower case letters, digits, _)")
    return os.path.join(directory, f"{role}.json")


def read_marker(role: str, directory: str = MARKER_DIR) -> dict[str, Any]:
    """The marker's state, its data and one sentence for each state but present.

    Returns ``{"state", "path", "data", "skip", "problem"}``: ``skip`` is set only when the
    marker is absent, ``problem`` only when it is unreadable or corrupt, ``data`` is ``{}``
    unless the marker is present.
    """
    path = marker_path(role, directory)
    result: dict[str, Any] = {"state": PRESENT, "path": path, "data": {}, "skip": "", "problem": ""}
    redo = f"run `nodeprep provision --tags {role}` again to rewrite it"
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        result.update(state=ABSENT, skip=f"role {role} not applied on this node")
        return result
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        result.update(
            state=UNREADABLE,
            problem=f"The {role} applied marker {path} cannot be read ({reason}); "
            f"fix its permissions or {redo}.",
        )
        return result
    try:
        data = json.loads(text)
    except ValueError as exc:
        result.update(
            state=CORRUPT,
            problem=f"The {role} applied marker {path} is not valid JSON ({exc}); {redo}.",
        )
        return result
    if not isinstance(data, dict):
        result.update(
            state=CORRUPT,
            problem=f"The {role} applied marker {path} holds a JSON {type(data).__name__}, "
            f"not an object; {redo}.",
        )
        return result
    if data.get("role", role) != role:
        result.update(
            state=CORRUPT,
            problem=f"The {role} applied marker {path} was written by role {data['role']!r}; "
            f"{redo}.",
        )
        return result
    result["data"] = data
    return result


def gate(
    role: str, names: list[str], directory: str = MARKER_DIR
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """ROLE's marker data, or the verdicts for each check named in NAMES when there is none.

    A present marker gives ``(data, [])``: the caller judges the node against DATA. Otherwise
    ``(None, verdicts)``: every check ``<role>.<name>`` skips when the marker is absent (the
    role was not applied) and fails with the marker's problem when it is unreadable or corrupt.
    """
    found = read_marker(role, directory)
    if found["state"] == PRESENT:
        return found["data"], []
    verdict = {"passed": False, "skip": found["skip"], "detail": found["problem"]}
    return None, [{"check": f"{role}.{name}", **verdict} for name in names]


def render(role: str, data: dict[str, Any]) -> str:
    """The marker's text: the data with its role, keys sorted, so equal data is equal text."""
    return json.dumps({**data, "role": role}, indent=2, sort_keys=True) + "\n"


def write_marker(role: str, data: dict[str, Any], directory: str = MARKER_DIR) -> bool:
    """Record DATA as ROLE's marker; False (nothing written) when it already says the same."""
    path = marker_path(role, directory)
    wanted = {**data, "role": role}
    current = read_marker(role, directory)
    if current["state"] == PRESENT and current["data"] == wanted:
        return False
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{role}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(render(role, data))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return True
