"""`nodeprep verify --checks heartbeat` against the role converged into a booted systemd container.

Healthy: the four heartbeat checks pass. A probe whose target is down fails heartbeat.probes
by name; a stopped service fails heartbeat.service and heartbeat.watchdog. Left to compose its
probes on a cloud VM (a GCP-shaped stand-in metadata service on 127.0.0.1), the role watches
the metadata service and its notices, and a preemption notice trips the daemon at once (an
AWS VM without a token endpoint, failing heartbeat.probes: tests/unit/test_heartbeat_probe_plan.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hb_converge import Converger

from collection_plugins import module_utils
from nodeprep.cli import cli
from nodeprep.lab.cloud_standin import CloudStandIn
from nspawn_node import Container

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
_icmp_closed = module_utils("probe_plan").icmp_closed

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


def composed_vars(wheel: Path, cloud: CloudStandIn) -> dict[str, Any]:
    """The role's defaults but for what the test must pin: the cloud (DMI here is this
    machine's), its metadata address, and the network target (the container shares this
    machine's network: its default gateway is not the test's to ping)."""
    return {
        "heartbeat_package_wheel": str(wheel),
        "heartbeat_watchdog_sec": 3,
        "heartbeat_metrics_interval_s": 1,
        "heartbeat_cloud": cloud.provider,
        "heartbeat_metadata_url": cloud.url,
        "nic_bond_probe_target": "127.0.0.1",
        "heartbeat_watch_paths": ["/srv/ckpt/run1"],
    }


def test_a_cloud_vm_is_watched_by_default_and_a_notice_trips_at_once(
    container: Container, converge: Converger, wheel: Path, tmp_path: Path
) -> None:
    container.sh(f"systemctl start {UNIT}; rm -f {METRICS}")
    with CloudStandIn("gcp") as cloud:
        done = converge(composed_vars(wheel, cloud))
        assert done.rc == 0, done.output[-3000:]
        marker = json.loads(container.sh("cat /etc/nodeprep/roles/heartbeat.json").stdout)
        assert marker["probe_source"] == "composed"
        # The container shares this machine's network namespace and so its ping_group_range:
        # where the daemon may not ping, the plan leaves the network out and says why.
        gid = int(container.sh("getent group nodeprep-heartbeat | cut -d: -f3").stdout)
        may_ping = not _icmp_closed(gid)
        network = ["bond-peer"] if may_ping else []
        assert marker["probes"] == ["metadata", "cloud-notice", *network, "root-write",
                                    "root-space", "training"]  # fmt: skip
        if not may_ping:
            assert any("the network: ICMP echo is closed" in u for u in marker["unwatched"])
        assert marker["probe_types"]["cloud-notice"] == "spot_notice"
        assert "GPUs: no NVIDIA PCI device" in marker["unwatched"]
        time.sleep(3)
        code, out, found = verify(converge, tmp_path)
        assert code == 0, out
        assert set(found.values()) == {"pass"}, found
        details = (tmp_path / "details").read_text()
        assert (
            f"heartbeat.probes: no failing probe among {5 + len(network)} composed probes: "
            "metadata (a GCP VM (heartbeat_cloud is gcp); its metadata service answered at "
            "http://127.0.0.1:" in details
        )
        assert "root-space (free space on /, which holds /srv/ckpt/run1)" in details

        cloud.notice = True
        posted = time.monotonic()
        line = _wait_journal(container, "action=trip probe=cloud-notice", 20)
        detected_s = time.monotonic() - posted
        print(f"preemption notice to the daemon's trip: {detected_s:.2f} s")
        assert "preemption or maintenance notice: preempted TRUE" in line
        assert detected_s < 5
        cloud.notice = False


def _wait_journal(box: Container, text: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        journal = box.sh(f"journalctl -u {UNIT} --no-pager -n 50", check=False).stdout
        found = [line for line in journal.splitlines() if text in line]
        if found:
            return found[-1]
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} in the journal within {timeout} s:\n{journal}")
