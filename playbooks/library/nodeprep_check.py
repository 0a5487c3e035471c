#!/usr/bin/python
"""Record one verify check: the result shape every check in nodeprep verify reports."""

from __future__ import annotations

import time

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: nodeprep_check
short_description: Report one nodeprep verify check as pass, fail or skip.
description:
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
"""


def describe_error(error: object, timeout: object) -> str:
    """One sentence for a probe that failed or hung instead of producing evidence."""
    result = error if isinstance(error, dict) else {"msg": str(error)}
    msg = str(result.get("msg") or result.get("stderr") or "no message").strip()
    if result.get("timedout") or "time frame" in msg or "timed out" in msg.lower():
        seconds = timeout or (result.get("timedout") or {}).get("period", "?")
        return f"timed out after {seconds} s: the probe did not answer; {msg.splitlines()[0]}"
    return f"the probe failed, so there is no evidence: {msg.splitlines()[0] if msg else msg}"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "check": {"type": "str", "required": True},
            "passed": {"type": "bool", "default": False},
            "skip": {"type": "str"},
            "detail": {"type": "str", "required": True},
            "since": {"type": "float"},
            "strict": {"type": "bool", "default": False},
            "error": {"type": "raw"},
            "timeout": {"type": "int"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["error"] is not None:
        status = "fail"
        detail = describe_error(params["error"], params["timeout"])
    elif params["skip"]:
        status = "skip"
        detail = params["skip"]
    else:
        status = "pass" if params["passed"] else "fail"
        detail = params["detail"]
    seconds = round(time.time() - params["since"], 3) if params["since"] else 0.0
    result = {"check": params["check"], "status": status, "detail": detail, "seconds": seconds}
    if status == "fail" and params["strict"]:
        module.fail_json(msg=f"check {params['check']} failed: {detail}", nodeprep_check=result)
    module.exit_json(changed=False, nodeprep_check=result, msg=f"{params['check']}: {status}")


if __name__ == "__main__":
    main()
