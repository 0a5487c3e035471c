#!/usr/bin/python
"""Read or record a role's applied marker, the evidence nodeprep verify checks against."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.nodeprep.hardening.plugins.module_utils.marker import (
    MARKER_DIR,
    PRESENT,
    marker_path,
    read_marker,
    render,
    write_marker,
)

DOCUMENTATION = r"""
module: nodeprep_marker
short_description: Read or record a role's applied marker for nodeprep verify.
description:
  - A role records at the end of a converge what it applied (versions, paths, thresholds) in
    its marker, C(/etc/nodeprep/roles/<role>.json); its verify tasks read it back and judge
    the node against it.
  - C(state=read) never fails for a missing marker. It reports one of four states - present,
    absent (the role was not applied, so its checks skip), unreadable or corrupt (its checks
    have no evidence, so they fail) - with one sentence for each but present.
  - C(state=present) writes the marker atomically and durably (temporary file, fsync,
    rename, fsync of the directory), and only when its data differ from what is there.
options:
  role:
    description: The role whose marker this is; also the file name.
    type: str
    required: true
  state:
    description: Read the marker, or record I(data) as the marker.
    type: str
    choices: [read, present]
    default: read
  data:
    description: What the role applied (a JSON object); C(state=present) only. The key
      C(role) is set to I(role).
    type: dict
    default: {}
  directory:
    description: The directory holding every role's marker.
    type: path
    default: /etc/nodeprep/roles
notes:
  - Supports check mode and diff mode. C(state=read) reads in check mode too.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Record what the tmux role applied.
  nodeprep.hardening.nodeprep_marker:
    role: tmux
    state: present
    data:
      version: "3.5a"
      binary: /opt/tmux/3.5a/bin/tmux

- name: Read the tmux marker for the verify checks.
  nodeprep.hardening.nodeprep_marker:
    role: tmux
  register: tmux_marker
  check_mode: false
"""

RETURN = r"""
marker_file:
  description: The marker file. (Not C(path), which would make Ansible add file attributes.)
  returned: always
  type: str
  sample: /etc/nodeprep/roles/tmux.json
marker:
  description: C(present), C(absent), C(unreadable) or C(corrupt) (after a write, C(present)).
  returned: always
  type: str
data:
  description: The marker's data (with its C(role) key); C({}) unless the state is present.
  returned: always
  type: dict
skip:
  description: Why the role's checks skip (the marker is absent), or an empty string.
  returned: always
  type: str
  sample: role tmux not applied on this node
problem:
  description: Why the role's checks have no evidence (unreadable or corrupt), or empty.
  returned: always
  type: str
msg:
  description: The problem, else the skip, else C(present); C(state=read) only.
  returned: when state is read
  type: str
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "role": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["read", "present"], "default": "read"},
            "data": {"type": "dict", "default": {}},
            "directory": {"type": "path", "default": MARKER_DIR},
        },
        supports_check_mode=True,
    )
    role, directory = module.params["role"], module.params["directory"]
    try:
        marker_path(role, directory)
    except ValueError as exc:
        module.fail_json(msg=f"nodeprep_marker role: {exc}")
    before = read_marker(role, directory)
    if module.params["state"] == "read":
        module.exit_json(
            changed=False,
            marker=before["state"],
            marker_file=before["path"],
            data=before["data"],
            skip=before["skip"],
            problem=before["problem"],
            msg=before["problem"] or before["skip"] or "present",
        )
    data: dict[str, Any] = module.params["data"]
    after = {**data, "role": role}
    changed = not (before["state"] == PRESENT and before["data"] == after)
    if changed and not module.check_mode:
        try:
            write_marker(role, data, directory)
        except OSError as exc:
            module.fail_json(msg=f"Cannot write the {role} marker {before['path']}: {exc}")
    diff = {
        "before_header": before["path"],
        "after_header": before["path"],
        "before": render(role, before["data"]) if before["state"] == PRESENT else "",
        "after": render(role, data),
    }
    module.exit_json(
        changed=changed,
        marker=PRESENT,
        marker_file=before["path"],
        data=after,
        skip="",
        problem="",
        diff=diff,
    )


if __name__ == "__main__":
    main()
