"""The verify report: table, JSON, JUnit XML (schema-validated), skip semantics, exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import xmlschema
from rich.console import Console

from nodeprep import report
from nodeprep.cli.progress import write_json

SCHEMA = xmlschema.XMLSchema(str(Path(__file__).with_name("junit.xsd")))


def raw(host: str, check: str, status: str, detail: str = "seen", seconds: float = 0.5) -> Any:
    return {"host": host, "check": check, "status": status, "detail": detail, "seconds": seconds}


MIXED = [
    raw("node1", "heartbeat.service", "pass", "active (running)"),
    raw("node1", "gpu.driver", "skip", "no NVIDIA driver"),
    raw("node2", "heartbeat.service", "fail", "inactive (dead); start it"),
    raw("node2", "gpu.driver", "skip", "no NVIDIA driver"),
    raw("node2", "disk.free", "fail", "/data has 0.00 GiB free, need 0.5 GiB"),
]


def build(raws: list[Any], **kwargs: Any) -> report.Report:
    hosts = kwargs.pop("hosts", ("node1", "node2"))
    return report.Report.build(raws, hosts, kwargs.pop("unreachable", {}), [], **kwargs)


def test_exit_codes() -> None:
    assert build([raw("node1", "a.b", "pass"), raw("node2", "a.b", "skip", "why")]).exit_code == 0
    assert build(MIXED).exit_code == 1
    dark = build(MIXED, unreachable={"node3": "ssh refused"}, hosts=("node1", "node2", "node3"))
    assert dark.exit_code == 3
    assert [(r.host, r.check) for r in dark.results if r.check == "verify.reachable"] == [
        ("node3", "verify.reachable")
    ]


def test_skips_are_never_passes_and_always_say_why() -> None:
    only_skips = build([raw("node1", "gpu.driver", "skip", "no driver")], hosts=("node1",))
    assert only_skips.count("pass") == 0
    assert only_skips.count("skip") == 1
    mute = build([raw("node1", "gpu.driver", "skip", "  ")], hosts=("node1",))
    assert mute.exit_code == 1
    assert mute.results[0].detail == "skipped without a reason; a skip must say why"


def test_unknown_status_and_silent_host_fail() -> None:
    odd = build([raw("node1", "x.y", "maybe")], hosts=("node1", "node2"))
    assert [(r.host, r.check, r.status) for r in odd.results] == [
        ("node1", "x.y", "fail"),
        ("node2", "verify.results", "fail"),
    ]


def test_task_errors_become_failures() -> None:
    built = report.Report.build([], ("node1",), {}, [("node1", "Read marker", "boom")])
    assert built.exit_code == 1
    assert built.results[0].check == "verify.task"
    assert "boom" in built.results[0].detail


def test_checks_filter_by_group_or_name() -> None:
    built = build(MIXED, selectors=("heartbeat", "disk.free"))
    assert sorted({r.check for r in built.results}) == ["disk.free", "heartbeat.service"]
    assert report.selected("heartbeat.service", ["heartbeat"])
    assert not report.selected("heartbeatx.service", ["heartbeat"])


def test_table_lists_failures_first_with_detail() -> None:
    console = Console(record=True, width=140, color_system=None)
    report.render(console, build(MIXED))
    text = console.export_text()
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines()
            if line.startswith("│")]  # fmt: skip
    assert rows == [
        ["disk.free", "-", "fail"],
        ["heartbeat.service", "pass", "fail"],
        ["gpu.driver", "skip", "skip"],
    ]
    lines = text.splitlines()
    first_fail = next(i for i, line in enumerate(lines) if line.startswith("FAIL "))
    first_skip = next(i for i, line in enumerate(lines) if line.startswith("skip "))
    assert first_fail < first_skip
    assert "FAIL node2 disk.free: /data has 0.00 GiB free, need 0.5 GiB" in text
    assert "skip node1 gpu.driver: no NVIDIA driver" in text
    assert "FAILED (1 pass, 2 fail, 2 skip), exit 1" in text


def test_json_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "out" / "report.json"
    write_json(path, report.to_json(build(MIXED)))
    data = json.loads(path.read_text())
    assert data["exit_code"] == 1
    assert data["counts"] == {"pass": 1, "fail": 2, "skip": 2}
    assert data["results"][0]["status"] == "fail"
    assert set(data["results"][0]) == {"host", "check", "status", "detail", "seconds"}


def test_junit_validates_against_the_schema() -> None:
    xml = report.to_junit(build(MIXED, unreachable={"node3": "refused"}, hosts=("node1", "node2")))
    SCHEMA.validate(xml)
    tree = SCHEMA.to_dict(xml)
    suites = {s["@name"]: s for s in tree["testsuite"]}
    assert suites["node2"]["@failures"] == 2
    assert suites["node2"]["@skipped"] == 1
    failed = [c for c in suites["node2"]["testcase"] if "failure" in c]
    assert {c["@name"] for c in failed} == {"disk.free", "heartbeat.service"}
    skipped = [c for c in suites["node1"]["testcase"] if "skipped" in c]
    assert skipped[0]["skipped"]["@message"] == "no NVIDIA driver"


def test_schema_rejects_a_broken_report() -> None:
    """The validation can fail: a testcase with two outcomes is refused."""
    xml = report.to_junit(build(MIXED)).replace(
        "</testcase>", '<skipped message="x" /><failure message="y" /></testcase>', 1
    )
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        SCHEMA.validate(xml)
