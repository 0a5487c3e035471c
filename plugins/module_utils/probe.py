"""Run a probe command on a node without letting a missing binary fail the whole module.

Standard library and Python 3.8 only: this runs on the nodes as Ansible module_utils.
"""

from __future__ import annotations

from typing import Any, Tuple

from ansible.module_utils.basic import AnsibleModule

Probe = Tuple[int, str, str]  # rc, stdout, stderr (a runtime alias: Python 3.8 on nodes)
NOT_STARTED = 127  # the shell's status for a command that cannot be found or started
TIMED_OUT = 124  # timeout(1)'s status for a command it had to stop


def probe(module: AnsibleModule, args: Any, shell: bool = False) -> Probe:
    """run_command's rc, stdout and stderr; a command that cannot start is rc 127, not a failure.

    ``run_command`` fails the module itself when the binary is missing unless it is told not
    to handle the exception; a verify check wants that as evidence ("not found"), not a crash.
    """
    try:
        rc, out, err = module.run_command(args, use_unsafe_shell=shell, handle_exceptions=False)
    except OSError as exc:
        return NOT_STARTED, "", str(exc)
    return int(rc), str(out), str(err)
