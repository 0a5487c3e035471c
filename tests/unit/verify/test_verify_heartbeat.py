"""The heartbeat checks' decisions (heartbeat_status), fed the node state a real node shows.

The module itself runs against a real systemd in tests/integration/heartbeat/test_hb_verify.py;
here its pure judge() gets the edges: restarts, a stale or future metrics file, failed probes,
the composed probe list shown with its reasons, and a cloud VM whose notices go unwatched.
"""

from __future__ import annotations

from typing import Any

import pytest

from collection_plugins import load
from nodeprep.heartbeat import metrics
from nodeprep.heartbeat.state import State

status = load("heartbeat_status")
PARAMS: dict[str, Any] = {
    "service": "nodeprep-heartbeat.service",
    "metrics_path": "/var/lib/node_exporter/textfile/nodeprep.prom",
    "metrics_interval_s": 5.0,
    "watchdog_sec": 30.0,
    "probes": ["gateway", "gpu"],
}
HEALTHY = {
    "ActiveState": "active",
    "SubState": "running",
    "NRestarts": "0",
    "WatchdogUSec": "30s",
    "WatchdogTimestampMonotonic": "995000000",  # 5 s before an uptime of 1000 s
}
METRICS = 'nodeprep_heartbeat_probe_state{probe="gateway",state="ok"} 1\n'


def verdicts(unit: dict[str, str], mtime: float | None = 990.0, metrics: str = METRICS) -> Any:
    found = status.judge(PARAMS, unit, 1000.0, mtime, 1000.0, metrics)
    return {c["check"]: c for c in found}


@pytest.mark.parametrize(
    ("span", "seconds"),
    [("30s", 30.0), ("1min 30s", 90.0), ("500ms", 0.5), ("0", 0.0), ("infinity", 0.0),
     ("2h", 7200.0), ("1min", 60.0)],
)  # fmt: skip
def test_systemd_time_spans(span: str, seconds: float) -> None:
    assert status.timespan_s(span) == seconds


def test_a_healthy_watchdog_passes_every_check() -> None:
    found = verdicts(HEALTHY)
    assert all(c["passed"] for c in found.values()), found
    assert found["heartbeat.watchdog"]["detail"] == (
        "WatchdogSec 30 s (provisioned 30 s), last keep-alive 5.0 s ago, 0 automatic restart(s)"
    )
    assert found["heartbeat.metrics"]["detail"].endswith("was written 10.0 s ago (limit 30 s)")
    assert found["heartbeat.probes"]["detail"] == "no failing probe among gateway, gpu"


def test_restarts_a_changed_watchdog_and_a_stopped_unit_fail() -> None:
    found = verdicts({**HEALTHY, "NRestarts": "2", "ActiveState": "inactive", "SubState": "dead"})
    assert not found["heartbeat.service"]["passed"]
    assert (
        "start it: systemctl start nodeprep-heartbeat.service"
        in found["heartbeat.service"]["detail"]
    )
    assert not found["heartbeat.watchdog"]["passed"]
    assert (
        "2 automatic restart(s): the daemon missed keep-alives"
        in found["heartbeat.watchdog"]["detail"]
    )
    assert not verdicts({**HEALTHY, "WatchdogUSec": "1min"})["heartbeat.watchdog"]["passed"]
    assert not verdicts({**HEALTHY, "WatchdogTimestampMonotonic": "0"})["heartbeat.watchdog"][
        "passed"
    ]


def test_missing_stale_and_future_metrics_fail_with_the_reason() -> None:
    missing = verdicts(HEALTHY, mtime=None, metrics="")["heartbeat.metrics"]
    assert not missing["passed"]
    assert "is missing; the watchdog is not writing metrics" in missing["detail"]
    stale = verdicts(HEALTHY, mtime=900.0)["heartbeat.metrics"]
    assert not stale["passed"]
    assert "was written 100.0 s ago (limit 30 s); the watchdog is not writing" in stale["detail"]
    future = verdicts(HEALTHY, mtime=1300.0)["heartbeat.metrics"]
    assert not future["passed"]
    assert "300 s in the future by this node's clock" in future["detail"]
    assert not verdicts(HEALTHY, metrics="")["heartbeat.probes"]["passed"]


def test_failed_probes_are_read_from_what_the_daemon_writes() -> None:
    probes = [
        metrics.ProbeReading("gateway", "tcp", State.HEALTHY, True, 0.01, 0),
        metrics.ProbeReading("gpu", "gpu", State.FAILED, False, 0.02, 3),
    ]
    text = metrics.render(metrics.Snapshot(probes, State.FAILED))
    assert status.failed_probes(text) == ["gpu"]


def test_failed_probes_are_named_once() -> None:
    text = METRICS + (
        'nodeprep_heartbeat_probe_state{probe="gpu",state="failed"} 1\n'
        'nodeprep_heartbeat_probe_state{probe="gpu",state="failed"} 1\n'
        'nodeprep_heartbeat_probe_state{probe="disk",state="failed"} 0\n'
    )
    found = verdicts(HEALTHY, metrics=text)["heartbeat.probes"]
    assert not found["passed"]
    assert found["detail"] == (
        "failing probe(s): gpu; see journalctl -u nodeprep-heartbeat.service"
    )


def probes_verdict(**plan: Any) -> dict[str, Any]:
    params = {**PARAMS, "probes": ["gateway", "training"], **plan}
    found = status.judge(params, HEALTHY, 1000.0, 990.0, 1000.0, METRICS)
    return next(c for c in found if c["check"] == "heartbeat.probes")


def test_verify_shows_the_composed_list_and_why() -> None:
    verdict = probes_verdict(
        probe_source="composed",
        cloud="none",
        probe_types={"gateway": "icmp", "training": "progress"},
        probe_reasons={
            "gateway": "the default route's gateway",
            "training": "registered trainers' steps",
        },
        unwatched=["GPUs: no NVIDIA PCI device"],
        missing=[],
    )
    assert verdict["passed"], verdict
    assert verdict["detail"] == (
        "no failing probe among 2 composed probes: gateway (the default route's gateway); "
        "training (registered trainers' steps); not watched: GPUs: no NVIDIA PCI device"
    )


def test_verify_fails_a_cloud_vm_whose_metadata_went_unwatched() -> None:
    silent = probes_verdict(
        probe_source="composed", cloud="aws", missing=["this is an AWS VM ... unwatched"]
    )
    assert not silent["passed"]
    assert silent["detail"] == "this is an AWS VM ... unwatched"
    user = probes_verdict(
        probe_source="heartbeat_probes",
        cloud="azure",
        cloud_evidence="DMI x",
        probe_types={"gateway": "icmp"},
        notice_providers=[],
        missing=[],
    )
    assert not user["passed"]
    assert user["detail"] == (
        "this is an Azure VM (DMI x) and no spot_notice probe with provider azure in "
        "heartbeat_probes reads its notices; add one, or leave heartbeat_probes unset to have "
        "it composed"
    )
    # A notice probe of another cloud's (the default provider is aws) watches nothing here.
    wrong = probes_verdict(
        probe_source="heartbeat_probes",
        cloud="azure",
        probe_types={"notice": "spot_notice"},
        notice_providers=["aws"],
    )
    assert not wrong["passed"]
    watched = probes_verdict(
        probe_source="heartbeat_probes",
        cloud="azure",
        probe_types={"notice": "spot_notice"},
        notice_providers=["azure"],
    )
    assert watched["passed"], watched
    older = probes_verdict(
        probe_source="heartbeat_probes", cloud="azure", probe_types={"notice": "spot_notice"}
    )  # a marker before providers
    assert older["passed"], older
