"""nodeprep_check runs on the controller: a check result is built from evidence that earlier
tasks already gathered, so it needs no connection and no Python start on the node. Under
software emulation or across a slow link that saves seconds per check; its timing also reads
the same clock as the `since` stamp, which `now()` takes on the controller."""

from __future__ import annotations

import time
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "check": {"type": "str", "required": True},
    "passed": {"type": "bool", "default": False},
    "skip": {"type": "str"},
    "detail": {"type": "str", "required": True},
    "since": {"type": "float"},
    "strict": {"type": "bool", "default": False},
    "error": {"type": "raw"},
    "timeout": {"type": "int"},
}


def describe_error(error: object, timeout: object) -> str:
    """One sentence for a probe that failed or hung instead of producing evidence."""
    result: dict[str, Any] = error if isinstance(error, dict) else {"msg": str(error)}
    msg = str(result.get("msg") or result.get("stderr") or "no message").strip()
    if result.get("timedout") or "time frame" in msg or "timed out" in msg.lower():
        seconds = timeout or (result.get("timedout") or {}).get("period", "?")
        return f"timed out after {seconds} s: the probe did not answer; {msg.splitlines()[0]}"
    return f"the probe failed, so there is no evidence: {msg.splitlines()[0] if msg else msg}"


def check_result(params: dict[str, Any], now: float) -> dict[str, Any]:
    """The reported shape: check, status (pass, fail or skip), detail, seconds."""
    if params["error"] is not None:
        status = "fail"
        detail = describe_error(params["error"], params["timeout"])
    elif params["skip"]:
        status = "skip"
        detail = params["skip"]
    else:
        status = "pass" if params["passed"] else "fail"
        detail = params["detail"]
    seconds = round(max(0.0, now - params["since"]), 3) if params["since"] else 0.0
    return {"check": params["check"], "status": status, "detail": detail, "seconds": seconds}


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp: Any = None, task_vars: Any = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        validation, params = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        if validation.error_messages:
            raise AnsibleActionFail("; ".join(validation.error_messages))
        check = check_result(params, time.time())
        result.update(
            changed=False, nodeprep_check=check, msg=f"{check['check']}: {check['status']}"
        )
        if check["status"] == "fail" and params["strict"]:
            result.update(failed=True, msg=f"check {check['check']} failed: {check['detail']}")
        return result
