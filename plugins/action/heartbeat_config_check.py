"""heartbeat_config_check runs on the controller: the role's probes and actions are judged by
the daemon's own validator (nodeprep.heartbeat.config) before the first task that changes a
node, so an unknown probe type never gets as far as a service user or a venv. The node still
validates the written file with the installed daemon (the template's `validate`)."""

from __future__ import annotations

import json
from typing import Any

from ansible.plugins.action import ActionBase


def judge(config: object) -> str | None:
    """None when the config is valid, else one sentence; raises ImportError without nodeprep."""
    from nodeprep.heartbeat.config import ConfigError, parse

    try:
        data = json.loads(config) if isinstance(config, str) else config
    except ValueError as exc:
        return f"heartbeat config does not render to JSON ({exc}); check heartbeat_probes."
    try:
        parse(data, check_paths=False)
    except ConfigError as exc:
        return f"heartbeat config: {exc} Fix heartbeat_probes or heartbeat_actions."
    return None


class ActionModule(ActionBase):  # type: ignore[misc]
    """Validate the rendered heartbeat config on the controller; never connects to the node."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        try:
            problem = judge(self._task.args.get("config"))
        except ImportError:
            result.update(
                skipped=True,
                msg="nodeprep is not importable on the controller; the node validates the "
                "config when it is written.",
            )
            return result
        result.update(changed=False, failed=problem is not None, msg=problem or "valid")
        return result
