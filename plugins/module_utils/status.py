"""The start every nodeprep *_status module shares: its options, and the role's marker.

``begin`` builds the AnsibleModule with the module's own options plus ``expect`` and
``marker_dir`` (documented once, in the ``nodeprep.hardening.marker`` doc fragment). With
``expect`` given the module judges against it; otherwise it reads the role's applied marker,
and where there is none to judge against it answers for every check and exits (absent: they
skip; unreadable or corrupt: they fail), so verify costs one call per role.

Python 3.8 only: this runs on the nodes as Ansible module_utils.
"""

from __future__ import annotations

import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.nodeprep.hardening.plugins.module_utils.marker import MARKER_DIR, gate


def begin(
    role: str, names: list[str], options: dict[str, Any] | None = None
) -> tuple[AnsibleModule, dict[str, Any], float]:
    """The module, what to judge against, and the epoch second it started."""
    started = time.time()
    module = AnsibleModule(
        argument_spec={
            "expect": {"type": "dict"},
            "marker_dir": {"type": "path", "default": MARKER_DIR},
            **(options or {}),
        },
        supports_check_mode=True,
    )
    expect: dict[str, Any] | None = module.params["expect"]
    if expect is None:
        expect, unapplied = gate(role, names, module.params["marker_dir"])
        if expect is None:
            module.exit_json(changed=False, started=started, checks=unapplied)
            raise SystemExit(0)  # exit_json has exited; this line is for the type checker
    return module, expect, started
