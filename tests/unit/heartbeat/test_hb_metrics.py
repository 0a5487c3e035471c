"""The textfile as Prometheus reads it: parsed back with prometheus_client's own parser, the
values are exact, counters are typed as counters and GPUs carry their UUID."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from nodeprep.contract import IgnoreReason
from nodeprep.heartbeat import metrics
from nodeprep.heartbeat.state import State

PROBE = metrics.ProbeReading("gateway", "tcp", State.HEALTHY, True, 0.0123, 0)


def parsed(snap: metrics.Snapshot) -> dict[str, tuple[str, dict[tuple[str, ...], float]]]:
    """family name -> (type, {label values: value}) of what render wrote."""
    found = {}
    for family in text_string_to_metric_families(metrics.render(snap)):
        samples = {tuple(s.labels.values()): s.value for s in family.samples}
        found[family.name] = (family.type, samples)
    return found


def test_a_unix_time_is_written_to_the_tenth_of_a_second() -> None:
    snap = metrics.Snapshot([PROBE], State.HEALTHY, {"trip": 1}, {"trip": 1796182362.8})
    _, samples = parsed(snap)["nodeprep_heartbeat_last_action_timestamp_seconds"]
    assert samples == {("trip",): 1796182362.8}


def test_every_total_is_a_counter_and_every_counter_a_total() -> None:
    snap = metrics.Snapshot(
        [PROBE], State.HEALTHY, {"trip": 2}, {"trip": 1796182362.8},
        gpu={"0": {"temperature_celsius": 41.0, "xid_events_total": 3.0}},
        gpu_uuid={"0": "GPU-5b6c1a2e-0d4f-4e50-8000-0123456789ab"},
    )  # fmt: skip
    text = metrics.render(snap)
    families = parsed(snap)
    counters = {name for name, (kind, _) in families.items() if kind == "counter"}
    assert counters == {
        "nodeprep_heartbeat_actions",
        "nodeprep_heartbeat_registrations_ignored",
        "nodeprep_heartbeat_gpu_xid_events",
    }
    for line in text.splitlines():
        if not line.startswith("#"):
            name = line.split("{")[0].split(" ")[0]
            assert name.endswith("_total") == (name.rsplit("_total", 1)[0] in counters), line
    assert 'nodeprep_heartbeat_actions_total{action="trip"} 2.0' in text


def test_gpus_are_labelled_by_index_and_uuid() -> None:
    uuid = "GPU-5b6c1a2e-0d4f-4e50-8000-0123456789ab"
    snap = metrics.Snapshot(
        [PROBE], State.HEALTHY, gpu={"0": {"temperature_celsius": 41.0}}, gpu_uuid={"0": uuid}
    )
    _, samples = parsed(snap)["nodeprep_heartbeat_gpu_temperature_celsius"]
    assert samples == {("0", uuid): 41.0}


def test_every_ignore_reason_is_exported_from_the_start() -> None:
    kind, samples = parsed(metrics.Snapshot([PROBE], State.HEALTHY))[
        "nodeprep_heartbeat_registrations_ignored"
    ]
    assert kind == "counter"
    assert len(samples) == len(IgnoreReason)
    assert set(samples.values()) == {0.0}
