#!/usr/bin/python
"""Record one verify check: the result shape every check in nodeprep verify reports.

Documentation only: the check runs on the controller, in action_plugins/nodeprep_check.py.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: nodeprep_check
short_description: Report one nodeprep verify check as pass, fail or skip.
description:
  - Runs on the controller, with no connection to the node (an action plugin).
  - Turns evidence gathered by earlier tasks into one check result, returned under
    C(nodeprep_check) so that the nodeprep runner collects it into the verify report.
  - A failed check does not fail the task, so the host's remaining checks still run;
    the report and the exit code carry the failure.
options:
  check:
    description: Dotted check name, role first (for example C(tmux.version)).
    type: str
    required: true
  passed:
    description: Whether the evidence meets the expectation. Ignored when I(skip) is set.
    type: bool
    default: false
  skip:
    description: Why the check cannot apply on this host; a skip is never a pass.
    type: str
  detail:
    description: What was seen, in one sentence; on failure also what to do about it.
    type: str
    required: true
  since:
    description: Epoch seconds when the check's evidence gathering started (for timing).
    type: float
  strict:
    description:
      - Fail the task when the check fails. Set through C(module_defaults) where a failed
        check must stop the host, as the rolling provision does between batches.
    type: bool
    default: false
  error:
    description: The failed probe's result (C(ansible_failed_result) in a rescue). When set
      the check fails with "timed out after N s" for a probe stopped by its task timeout,
      or with the probe's error message otherwise; I(passed) and I(skip) are ignored.
    type: raw
  timeout:
    description: The probe's task timeout in seconds, named in the timed-out detail.
    type: int
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Report whether tmux answers with the expected version.
  nodeprep.hardening.nodeprep_check:
    check: tmux.version
    passed: "{{ tmux_version.rc == 0 and tmux_version.stdout == 'tmux 3.5a' }}"
    detail: "tmux -V printed {{ tmux_version.stdout }}, expected tmux 3.5a"
    since: "{{ verify_since }}"

- name: Report a probe that failed or timed out (in a rescue section).
  nodeprep.hardening.nodeprep_check:
    check: preflight.disk
    error: "{{ ansible_failed_result }}"
    timeout: 60
    detail: ""
"""

RETURN = r"""
nodeprep_check:
  description: The check result, collected by the nodeprep runner into the verify report.
  returned: always
  type: dict
  contains:
    check:
      description: The check name, as given in I(check).
      type: str
    status:
      description: C(pass), C(fail) or C(skip).
      type: str
    detail:
      description:
        - The I(detail) given; for a skip, the I(skip) reason instead; when I(error) is set,
          a sentence built from the failed or timed-out probe.
      type: str
    seconds:
      description: Seconds from I(since) until the check was recorded; 0 without I(since).
      type: float
  sample: {check: tmux.version, status: pass, detail: "tmux 3.5a from /opt/tmux", seconds: 0.4}
msg:
  description:
    - The check name and its status, joined by a colon and a space. When I(strict) is set
      and the check fails, a sentence with the check name and its detail instead.
  returned: always
  type: str
  sample: "tmux.version: pass"
"""
