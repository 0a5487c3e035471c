#!/usr/bin/python
"""Judge the running heartbeat watchdog for nodeprep verify: service, watchdog, metrics, probes."""

from __future__ import annotations

import os
import re
import time
from typing import Any

from ansible_collections.nodeprep.hardening.plugins.module_utils.cloud_metadata import A_VM
from ansible_collections.nodeprep.hardening.plugins.module_utils.probe import probe
from ansible_collections.nodeprep.hardening.plugins.module_utils.status import begin

DOCUMENTATION = r"""
module: heartbeat_status
short_description: Judge the heartbeat watchdog on a node for nodeprep verify.
description:
  - Reads the service's state from systemd (C(systemctl show)), the time of its last
    watchdog keep-alive, and the Prometheus textfile the daemon writes, and judges them
    against what the heartbeat role recorded in its applied marker.
  - Returns four verdicts under C(checks) for C(nodeprep_check) to report -
    C(heartbeat.service) (the unit is active), C(heartbeat.watchdog) (C(WatchdogSec) as
    provisioned, a keep-alive within it, no automatic restart), C(heartbeat.metrics) (the
    textfile was rewritten within three metrics intervals, at least 30 s) and
    C(heartbeat.probes) (no probe in the failed state and, on a cloud VM, its metadata
    service and notices watched; the detail lists the probes and why each was chosen).
  - Reads only; never changes the node.
options:
  expect:
    description:
      - What to judge against - the role's marker data - C(service) (the systemd unit),
        C(metrics_path) (the textfile the daemon rewrites), C(metrics_interval_s),
        C(watchdog_sec) (the C(WatchdogSec) the role set, in seconds) and C(probes) (the
        configured probes' names); optionally what the role recorded of its probe plan -
        C(probe_types), C(probe_source), C(cloud), C(cloud_evidence), C(probe_reasons),
        C(unwatched), C(missing) and C(notice_providers). Without it, the module reads the
        heartbeat role's marker from I(marker_dir).
    type: dict
extends_documentation_fragment:
  - nodeprep.hardening.marker
notes:
  - Supports check mode.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Judge the watchdog by the settings recorded at its last converge.
  nodeprep.hardening.heartbeat_status:
  register: heartbeat
  check_mode: false

- name: Judge a watchdog set up some other way.
  nodeprep.hardening.heartbeat_status:
    expect:
      service: nodeprep-heartbeat.service
      metrics_path: /var/lib/node_exporter/textfile/nodeprep_heartbeat.prom
      metrics_interval_s: 15
      watchdog_sec: 60
      probes: [gateway, gpu]
  register: heartbeat
  check_mode: false
"""

RETURN = r"""
started:
  description: Epoch seconds when the module started, for the I(since) option of nodeprep_check.
  returned: always
  type: float
unit:
  description: The unit properties read from systemd (ActiveState, SubState, NRestarts, ...).
  returned: always
  type: dict
checks:
  description: One verdict per check, each with C(check), C(passed), C(detail) and C(skip)
    (the reason it skips, or empty).
  returned: always
  type: list
  elements: dict
  sample:
    - check: heartbeat.service
      passed: true
      detail: nodeprep-heartbeat.service is active (running)
"""

NAMES = ["service", "watchdog", "metrics", "probes"]
# The settings the role records in its marker, each needed to judge.
SETTINGS = ("service", "metrics_path", "metrics_interval_s", "watchdog_sec", "probes")
# What the role recorded of the probe plan (markers written before it lack these).
PLAN = ("probe_types", "probe_source", "cloud", "cloud_evidence", "probe_reasons", "unwatched",
        "missing", "notice_providers")  # fmt: skip
PROPERTIES = (
    "ActiveState",
    "SubState",
    "NRestarts",
    "WatchdogUSec",
    "WatchdogTimestampMonotonic",
)
_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(us|ms|s|min|h|d|w)?(?=\s|$|\d)")
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0,
           "w": 604800.0}  # fmt: skip
# The sample's value as prometheus_client writes it (1.0), or as any exposition writer may.
_FAILED_PROBE = re.compile(
    r'^nodeprep_heartbeat_probe_state\{probe="([^"]+)",state="failed"\} (\S+)$'
)


def parse_show(text: str) -> dict[str, str]:
    """``systemctl show`` output (KEY=VALUE lines) as a mapping."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            found[key] = value
    return found


def timespan_s(text: str) -> float:
    """A systemd time span (``30s``, ``1min 30s``, ``500ms``, ``0``, ``infinity``) in seconds."""
    text = text.strip()
    if text in ("", "0", "infinity"):
        return 0.0
    return sum(float(n) * _UNIT_S[unit or "s"] for n, unit in _SPAN.findall(text))


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def failed_probes(metrics: str) -> list[str]:
    """Probes the textfile shows in the failed state, in order, each once."""
    names: list[str] = []
    for line in metrics.splitlines():
        match = _FAILED_PROBE.match(line.strip())
        if match and _number(match.group(2)) == 1.0 and match.group(1) not in names:
            names.append(match.group(1))
    return names


def unwatched_cloud(params: dict[str, Any]) -> list[str]:
    """What a cloud VM must be watched for and is not: the plan's own findings (a metadata
    service that did not answer), or a user's probe list without a metadata probe."""
    missing = list(params.get("missing") or [])
    cloud = params.get("cloud") or "none"
    providers = params.get("notice_providers")
    if providers is None:  # a marker from before notice_providers: any notice probe counts
        types = (params.get("probe_types") or {}).values()
        providers = [cloud] if "spot_notice" in types else []
    if cloud != "none" and not missing and cloud not in providers:
        missing.append(
            f"this is {A_VM.get(cloud, cloud)} ({params.get('cloud_evidence', '')}) and no "
            f"spot_notice probe with provider {cloud} in heartbeat_probes reads its notices; "
            "add one, or leave heartbeat_probes unset to have it composed"
        )
    return missing


def chosen(params: dict[str, Any]) -> str:
    """The configured probes, with why each was chosen when the role composed them."""
    names = list(params["probes"])
    if params.get("probe_source") != "composed":
        return ", ".join(names) or "no probes"
    reasons = params.get("probe_reasons") or {}
    said = f"{len(names)} composed probes: " + "; ".join(
        f"{name} ({reasons[name]})" if name in reasons else name for name in names
    )
    unwatched = params.get("unwatched") or []
    return said + (f"; not watched: {'; '.join(unwatched)}" if unwatched else "")


def judge(
    params: dict[str, Any],
    unit: dict[str, str],
    uptime_s: float,
    metrics_mtime: float | None,
    now: float,
    metrics: str,
) -> list[dict[str, Any]]:
    """The four verdicts from what was read; pure, so the tests feed it any node's state."""
    service = params["service"]
    active, sub = unit.get("ActiveState", "unknown"), unit.get("SubState", "unknown")
    restarts = int(unit.get("NRestarts", "0") or 0)
    watchdog_s = timespan_s(unit.get("WatchdogUSec", "0"))
    pinged = int(unit.get("WatchdogTimestampMonotonic", "0") or 0)
    ping_age = uptime_s - pinged / 1e6 if pinged > 0 else -1.0
    provisioned = float(params["watchdog_sec"])
    watchdog_ok = watchdog_s == provisioned and restarts == 0 and 0 <= ping_age < watchdog_s
    path = params["metrics_path"]
    max_age = max(3 * float(params["metrics_interval_s"]), 30.0)
    if metrics_mtime is None:
        metrics_ok, said = (
            False,
            "is missing; the watchdog is not writing metrics: check the service",
        )
    elif now < metrics_mtime:
        metrics_ok = False
        said = (
            f"was written {metrics_mtime - now:.0f} s in the future by this node's clock: "
            "was the clock stepped back?"
        )
    else:
        age = now - metrics_mtime
        metrics_ok = age <= max_age
        said = f"was written {age:.1f} s ago (limit {max_age:g} s)" + (
            "" if metrics_ok else "; the watchdog is not writing metrics: check the service"
        )
    failing = failed_probes(metrics)
    missing = unwatched_cloud(params)
    if missing:
        probes = "; ".join(missing)
    elif failing:
        probes = f"failing probe(s): {', '.join(failing)}; see journalctl -u {service}"
    elif not metrics:
        probes = "no metrics to read the probes from"
    else:
        probes = f"no failing probe among {chosen(params)}"
    restarted = (
        "" if restarts == 0
        else f": the daemon missed keep-alives or crashed; see journalctl -u {service}"
    )  # fmt: skip
    return [
        {
            "check": "heartbeat.service",
            "passed": active == "active",
            "detail": f"{service} is {active} ({sub})"
            + ("" if active == "active" else f"; start it: systemctl start {service}"),
        },
        {
            "check": "heartbeat.watchdog",
            "passed": watchdog_ok,
            "detail": f"WatchdogSec {watchdog_s:g} s (provisioned {provisioned:g} s), last "
            f"keep-alive {ping_age:.1f} s ago, {restarts} automatic restart(s){restarted}",
        },
        {"check": "heartbeat.metrics", "passed": metrics_ok, "detail": f"{path} {said}"},
        {
            "check": "heartbeat.probes",
            "passed": bool(metrics) and not failing and not missing,
            "detail": probes,
        },
    ]


def main() -> None:
    module, expect, started = begin("heartbeat", NAMES)
    lacking = [key for key in SETTINGS if expect.get(key) in (None, "")]
    if lacking:
        problem = (
            f"The heartbeat applied marker lacks {', '.join(lacking)}; run `nodeprep "
            "provision --tags heartbeat` again to rewrite it."
        )
        checks = [{"check": f"heartbeat.{n}", "passed": False, "skip": "", "detail": problem}
                  for n in NAMES]  # fmt: skip
        module.exit_json(changed=False, started=started, checks=checks)
        return
    params = {key: expect[key] for key in SETTINGS + PLAN if key in expect}
    args = ["systemctl", "show", params["service"]] + [f"--property={p}" for p in PROPERTIES]
    rc, out, err = probe(module, args)
    if rc != 0:
        module.fail_json(msg=f"`systemctl show {params['service']}` failed: {err.strip()}")
    unit = parse_show(out)
    uptime = time.monotonic()  # CLOCK_MONOTONIC, the clock of WatchdogTimestampMonotonic
    try:
        mtime: float | None = os.stat(params["metrics_path"]).st_mtime
        with open(params["metrics_path"], encoding="utf-8", errors="replace") as handle:
            metrics = handle.read()
    except OSError:
        mtime, metrics = None, ""
    checks = judge(params, unit, uptime, mtime, time.time(), metrics)
    module.exit_json(
        changed=False, started=started, unit=unit, checks=[{"skip": "", **c} for c in checks]
    )


if __name__ == "__main__":
    main()
