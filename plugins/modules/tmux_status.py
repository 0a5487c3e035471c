#!/usr/bin/python
"""Judge the tmux the tmux role installed: version, the config a new server loads, logind."""

from __future__ import annotations

import json
import shlex
from typing import Any

from ansible_collections.nodeprep.hardening.plugins.module_utils.probe import Probe, probe
from ansible_collections.nodeprep.hardening.plugins.module_utils.status import begin
from ansible_collections.nodeprep.hardening.plugins.module_utils.versions import loose_version

DOCUMENTATION = r"""
module: tmux_status
short_description: Judge tmux on a node against what the tmux role recorded, for nodeprep verify.
description:
  - Runs the tmux in effect (C(-V)); starts a throwaway server on a private socket, with
    C(HOME) pointing nowhere so that only the system-wide config is read, and reads back
    each hardened setting; asks logind whether each tmux user lingers and whether it kills
    their processes at logout (C(KillUserProcesses), C(KillExcludeUsers)).
  - Returns four verdicts under C(checks) for C(nodeprep_check) - C(tmux.version),
    C(tmux.config), C(tmux.linger) and C(tmux.logout_survival) - judged against the role's
    applied marker. Evidence that cannot be gathered fails a check, never passes it.
  - Changes nothing on the node; the throwaway server is killed before the module returns.
options:
  expect:
    description: What to judge against - the role's marker data (C(binary), C(version) or
      C(min_version), C(settings), C(config_path), C(users)). Without it, the module reads
      the tmux role's marker from I(marker_dir).
    type: dict
extends_documentation_fragment:
  - nodeprep.hardening.marker
notes:
  - Supports check mode.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Judge tmux against its applied marker.
  nodeprep.hardening.tmux_status:
  register: tmux
  check_mode: false
"""

RETURN = r"""
started:
  description: Epoch seconds when the module started, for the I(since) option of nodeprep_check.
  returned: always
  type: float
checks:
  description: One verdict per check, each with C(check), C(passed), C(detail) and C(skip).
  returned: always
  type: list
  elements: dict
"""

_AGAIN = "run the tmux role again"
NAMES = ["version", "config", "linger", "logout_survival"]


def settings_seen(text: str) -> dict[str, str]:
    """``show-options -g NAME`` lines as NAME -> value, without tmux's quotes."""
    seen = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name:
            seen[name] = value[1:-1] if len(value) > 1 and value[0] == value[-1] == '"' else value
    return seen


def judge(
    expect: dict[str, Any],
    version: Probe,
    settings: Probe | None,
    linger: dict[str, Probe],
    logind: Probe | None,
) -> list[dict[str, Any]]:
    """The four verdicts from what the probes printed; pure, so tests feed it any node."""
    binary = expect.get("binary", "tmux")
    rc, out, err = version
    out = out.strip()
    wanted_version = expect.get("version") or ""
    if wanted_version:
        version_ok, expected = rc == 0 and out == f"tmux {wanted_version}", f"tmux {wanted_version}"
    else:
        minimum = str(expect.get("min_version", ""))
        found = out.split()[-1] if out else ""
        version_ok = rc == 0 and bool(found) and loose_version(found) >= loose_version(minimum)
        expected = f"tmux {minimum} or newer"
    checks = [
        {
            "check": "tmux.version",
            "passed": version_ok,
            "detail": f'{binary} -V printed "{out or err.strip() or "nothing"}", expected '
            f"{expected}; run the tmux role (nodeprep provision --tags tmux) to reinstall it.",
        }
    ]
    wanted = {str(k): str(v) for k, v in (expect.get("settings") or {}).items()}
    if not wanted or settings is None:
        checks.append({"check": "tmux.config", "passed": False, "detail": "",
                       "skip": "the role was applied without a config"})  # fmt: skip
    else:
        s_rc, s_out, s_err = settings
        seen = settings_seen(s_out)
        said = f" ({s_err.strip()})" if s_err.strip() else ""
        checks.append(
            {
                "check": "tmux.config",
                "passed": s_rc == 0 and seen == wanted,
                "detail": f"A new tmux server started with {_json(seen)}, expected "
                f"{_json(wanted)}{said}; fix {expect.get('config_path', 'the config')} or "
                f"{_AGAIN}.",
            }
        )
    users = [str(u) for u in expect.get("users") or []]
    if not users:
        for name in ("tmux.linger", "tmux.logout_survival"):
            checks.append({"check": name, "passed": False, "detail": "",
                           "skip": "no tmux_users were configured"})  # fmt: skip
        return [{"skip": "", **c} for c in checks]
    lingering = {u: linger.get(u, (1, "", "not probed")) for u in users}
    shown = " ".join(
        f"{u}={p[1].strip() or p[2].strip() or 'nothing'}" for u, p in lingering.items()
    )
    checks.append(
        {
            "check": "tmux.linger",
            "passed": all(p[0] == 0 and p[1].strip() == "yes" for p in lingering.values()),
            "detail": f"loginctl reports Linger as {shown}; expected yes for each of "
            f"{', '.join(users)}; {_AGAIN} (it runs loginctl enable-linger USER).",
        }
    )
    l_rc, l_out, l_err = logind or (1, "", "not probed")
    lines = l_out.splitlines()
    kill_off = bool(lines) and lines[0].strip() == "b false"
    excluded = lines[1].split() if len(lines) > 1 else []
    survives = l_rc == 0 and (kill_off or all(f'"{u}"' in excluded for u in users))
    checks.append(
        {
            "check": "tmux.logout_survival",
            "passed": survives,
            "detail": "logind reports KillUserProcesses and KillExcludeUsers as "
            f'"{" / ".join(lines) or l_err.strip() or "nothing"}"; every one of '
            f"{', '.join(users)} must be excluded (or KillUserProcesses off); {_AGAIN}, "
            "which restarts systemd-logind.",
        }
    )
    return [{"skip": "", **c} for c in checks]


def _json(mapping: dict[str, str]) -> str:
    return json.dumps(mapping)


def main() -> None:
    module, expect, started = begin("tmux", NAMES)
    binary = str(expect.get("binary", "tmux"))
    version = probe(module, [binary, "-V"])
    settings = None
    if expect.get("settings"):
        shows = " ".join(f"';' show-options -g {shlex.quote(str(n))}" for n in expect["settings"])
        command = (
            f"env -u TMUX HOME=/nonexistent {shlex.quote(binary)} -L nodeprep-verify "
            f"new-session -d 'sleep 30' {shows} ';' kill-server"
        )
        settings = probe(module, command, shell=True)
    linger = {
        str(user): probe(
            module, ["loginctl", "show-user", str(user), "--property=Linger", "--value"]
        )
        for user in expect.get("users") or []
    }
    logind = None
    if expect.get("users"):
        logind = probe(
            module,
            ["busctl", "get-property", "org.freedesktop.login1", "/org/freedesktop/login1",
             "org.freedesktop.login1.Manager", "KillUserProcesses", "KillExcludeUsers"]
        )  # fmt: skip
    checks = judge(expect, version, settings, linger, logind)
    module.exit_json(changed=False, started=started, checks=checks)


if __name__ == "__main__":
    main()
