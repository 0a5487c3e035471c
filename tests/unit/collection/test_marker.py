"""The applied-marker helper every role's verify reads through: four states, one path rule.

Real files in a temporary directory; the module_utils file is imported the way Ansible
imports it on a node (ansible_collections.nodeprep.hardening.plugins.module_utils.marker).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nodeprep import paths

REPO = Path(__file__).resolve().parents[3]
sys.path.append(str(paths.link_collection(REPO / ".ansible" / "collections")))

from ansible_collections.nodeprep.hardening.plugins.module_utils import marker  # noqa: E402


def test_absent_marker_means_the_role_was_not_applied(tmp_path: Path) -> None:
    found = marker.read_marker("tmux", str(tmp_path))
    assert found["state"] == "absent"
    assert found["skip"] == "role tmux not applied on this node"
    assert found["problem"] == ""
    assert found["data"] == {}


def test_unreadable_marker_is_a_problem_not_a_skip(tmp_path: Path) -> None:
    (tmp_path / "tmux.json").mkdir()  # root reads any file; a directory it cannot read
    found = marker.read_marker("tmux", str(tmp_path))
    assert found["state"] == "unreadable"
    assert found["skip"] == ""
    assert found["problem"].startswith(f"The tmux applied marker {tmp_path}/tmux.json cannot be")
    assert "nodeprep provision --tags tmux" in found["problem"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"version": "3.5a"', "is not valid JSON"),
        ("[1, 2]", "holds a JSON list, not an object"),
        ('{"role": "heartbeat"}', "was written by role 'heartbeat'"),
        (b"\xff\xfe{}", "cannot be read"),
    ],
)
def test_corrupt_markers_are_named(tmp_path: Path, text: str | bytes, says: str) -> None:
    target = tmp_path / "tmux.json"
    if isinstance(text, bytes):
        target.write_bytes(text)
    else:
        target.write_text(text)
    found = marker.read_marker("tmux", str(tmp_path))
    assert found["state"] in ("corrupt", "unreadable")
    assert says in found["problem"], found
    assert found["skip"] == ""


def test_write_is_durable_idempotent_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    directory = tmp_path / "roles"
    assert marker.write_marker("tmux", {"version": "3.5a", "binary": "/opt/t"}, str(directory))
    assert not marker.write_marker("tmux", {"binary": "/opt/t", "version": "3.5a"}, str(directory))
    assert [p.name for p in directory.iterdir()] == ["tmux.json"]
    text = (directory / "tmux.json").read_text()
    assert json.loads(text) == {"binary": "/opt/t", "role": "tmux", "version": "3.5a"}
    assert text == marker.render("tmux", {"version": "3.5a", "binary": "/opt/t"})
    assert oct((directory / "tmux.json").stat().st_mode & 0o777) == "0o644"
    found = marker.read_marker("tmux", str(directory))
    assert found["state"] == "present"
    assert found["data"]["version"] == "3.5a"
    assert marker.write_marker("tmux", {"version": "3.6"}, str(directory))
    assert marker.read_marker("tmux", str(directory))["data"] == {"role": "tmux", "version": "3.6"}


@pytest.mark.parametrize("role", ["../etc/passwd", "Tmux", "", "a" * 65, "tmux.json"])
def test_a_role_name_never_becomes_another_path(role: str) -> None:
    with pytest.raises(ValueError, match="is not a role name"):
        marker.marker_path(role)
