"""`nodeprep verify --checks heartbeat` against the role converged into a booted systemd container.

Healthy: the four heartbeat checks pass. A probe whose target is down fails heartbeat.probes
by name; a stopped service fails heartbeat.service and heartbeat.watchdog.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hb_converge import Converger

from nodeprep.cli import cli
from nspawn_node import Container

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
UNIT = "nodeprep-heartbeat.service"
METRICS = "/var/lib/prometheus/node-exporter/nodeprep_heartbeat.prom"


def role_vars(wheel: Path, dead_port: int | None = None) -> dict[str, Any]:
    probes: list[dict[str, Any]] = [
        {"name": "ckpt", "type": "writable", "path": "/srv/ckpt", "interval": 1},
        {"name": "gpu", "type": "gpu", "interval": 5},
    ]
    if dead_port is not None:
        probes.append({"name": "dead", "type": "tcp", "host": "127.0.0.1", "port": dead_port,
                       "interval": 0.5, "timeout": 0.3, "fail_threshold": 2})  # fmt: skip
    return {
        "heartbeat_package_wheel": str(wheel),
        "heartbeat_watchdog_sec": 3,
        "heartbeat_metrics_interval_s": 1,
        "heartbeat_probes": probes,
    }


def verify(converge: Converger, tmp_path: Path) -> tuple[int, str, dict[str, str]]:
    """Exit code, terminal output, and check -> status; details land in ``tmp_path/details``."""
    out = tmp_path / "report.json"
    inventory = converge.workdir / "inventory.ini"
    result = CliRunner().invoke(
        cli, ["verify", str(inventory), "--checks", "heartbeat", "--json", str(out)]
    )
    results = json.loads(out.read_text())["results"]
    (tmp_path / "details").write_text("\n".join(f"{r['check']}: {r['detail']}" for r in results))
    found = {r["check"]: r["status"] for r in results}
    return result.exit_code, result.output, found


def test_heartbeat_checks_pass_then_fail_by_name(
    container: Container, converge: Converger, wheel: Path, tmp_path: Path
) -> None:
    container.sh("mkdir -p /srv/ckpt && chmod 1777 /srv/ckpt")  # the daemon user writes there
    first = converge(role_vars(wheel))
    assert first.rc == 0, first.output[-3000:]
    assert (
        json.loads(container.sh("cat /etc/nodeprep/roles/heartbeat.json").stdout)["watchdog_sec"]
        == 3
    )
    time.sleep(3)  # a few keep-alives and metrics writes
    code, out, found = verify(converge, tmp_path)
    assert code == 0, out
    assert found == dict.fromkeys(
        ["heartbeat.service", "heartbeat.watchdog", "heartbeat.metrics", "heartbeat.probes"], "pass"
    )
    details = (tmp_path / "details").read_text()
    assert "heartbeat.probes: no failing probe among ckpt, gpu" in details
    assert f"heartbeat.metrics: {METRICS} was written " in details
    assert " s ago (limit 30 s)" in details

    # Port 9 (discard) on loopback: nothing listens, so the probe fails at once.
    second = converge(role_vars(wheel, dead_port=9))
    assert second.rc == 0, second.output[-3000:]
    time.sleep(4)
    code, out, found = verify(converge, tmp_path)
    assert code == 1, out
    assert [c for c, s in found.items() if s == "fail"] == ["heartbeat.probes"]
    assert "failing probe(s): dead" in out

    container.sh(f"systemctl stop {UNIT}")
    code, out, found = verify(converge, tmp_path)
    assert code == 1, out
    assert sorted(c for c, s in found.items() if s == "fail") == [
        "heartbeat.probes",
        "heartbeat.service",
        "heartbeat.watchdog",
    ]
    assert f"{UNIT} is inactive" in out

    # A metrics file from the future (a clock stepped back) and a missing one say so.
    container.sh(f"touch -d @$(( $(date +%s) + 100 )) {METRICS}")
    code, out, found = verify(converge, tmp_path)
    assert found["heartbeat.metrics"] == "fail"
    assert "s in the future by this node's clock" in (tmp_path / "details").read_text()
    container.sh(f"rm {METRICS}")
    code, out, found = verify(converge, tmp_path)
    assert found["heartbeat.metrics"] == "fail"
    assert (
        f"{METRICS} is missing; the watchdog is not writing metrics"
        in (tmp_path / "details").read_text()
    )
