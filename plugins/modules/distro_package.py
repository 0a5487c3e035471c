#!/usr/bin/python
"""Read the version of a package the node's distribution installs or would install."""

from __future__ import annotations

DOCUMENTATION = r"""
module: distro_package
short_description: Read the installed and candidate version of a distribution package.
description:
  - Asks apt (C(apt-cache policy)) which version of a package is installed and which one
    an install would pick, and whether that version's upstream release is at least
    I(min_version). A role uses it to choose between the distribution's package and its
    own build before anything is installed.
  - The installed version counts when the package lists offer nothing newer (a node with
    no reachable mirror still has its installed packages).
  - Reads only; never changes the node. On a node without apt every version is null and
    I(meets_minimum) is false.
options:
  name:
    description: The package's name, for example C(tmux).
    type: str
    required: true
  min_version:
    description:
      - The oldest upstream release that will do, for example C(2.9). Compared number by
        number, a letter after a number sorting after it (3.5a is newer than 3.5).
      - Left out, any version meets it.
    type: str
    default: ""
notes:
  - Supports check mode; the module only reads.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Read the version of the distribution's tmux.
  nodeprep.hardening.distro_package:
    name: tmux
    min_version: "2.9"
  register: distro_tmux
"""

RETURN = r"""
manager:
  description: The package manager asked, or null when the node has none this module reads.
  returned: always
  type: str
  sample: apt
installed:
  description: The installed package version, or null when the package is not installed.
  returned: always
  type: str
  sample: 3.5a-3
candidate:
  description: The version an install would pick, or null when no source offers it.
  returned: always
  type: str
  sample: 3.5a-3
upstream_version:
  description: The upstream release of the candidate (else of the installed version).
  returned: always
  type: str
  sample: 3.5a
meets_minimum:
  description: Whether upstream_version is at least min_version.
  returned: always
  type: bool
"""

from typing import Any, Dict, Optional

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.nodeprep.hardening.plugins.module_utils.probe import NOT_STARTED, probe
from ansible_collections.nodeprep.hardening.plugins.module_utils.versions import (
    loose_version,
    upstream_version,
)

Policy = Dict[str, Optional[str]]  # a runtime alias: Python 3.8 on nodes


def apt_policy(text: str) -> Policy:
    """The Installed and Candidate lines of ``apt-cache policy NAME`` (C locale); (none) is null."""
    found: Policy = {"installed": None, "candidate": None}
    for line in text.splitlines():
        key, _, value = line.strip().partition(":")
        field = key.lower()
        if field in found and found[field] is None:
            value = value.strip()
            found[field] = None if value in ("", "(none)") else value
    return found


def judge(policy: Policy, min_version: str) -> dict[str, Any]:
    """The version an install would give and whether it is new enough; pure, for the tests."""
    chosen = policy.get("candidate") or policy.get("installed")
    upstream = upstream_version(chosen) if chosen else None
    meets = upstream is not None and loose_version(upstream) >= loose_version(min_version)
    return {**policy, "upstream_version": upstream, "meets_minimum": meets}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "min_version": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    name, min_version = module.params["name"], module.params["min_version"]
    rc, out, err = probe(module, ["env", "LC_ALL=C", "apt-cache", "policy", name])
    if rc == NOT_STARTED:  # no apt-cache on this node (env's status for a missing command)
        module.exit_json(changed=False, manager=None, installed=None, candidate=None,
                         upstream_version=None, meets_minimum=False)  # fmt: skip
        return
    if rc != 0:
        module.fail_json(msg=f"apt-cache policy {name} failed (rc {rc}): {err.strip() or out}")
        return
    module.exit_json(changed=False, manager="apt", **judge(apt_policy(out), min_version))


if __name__ == "__main__":
    main()
