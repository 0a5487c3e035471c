"""Verify check results -> one report: a terminal table, JSON and JUnit XML, and the exit code.

The report is built only from what the nodes said (``nodeprep_check`` results) plus what the
run itself saw (unreachable hosts, tasks that failed outside any check). A host that reported
nothing is a failure too: silence proves nothing.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from nodeprep.runner import RunResult

EXIT_OK, EXIT_FAILED, EXIT_UNREACHABLE = 0, 1, 3
STATUSES = ("pass", "fail", "skip")
# Synthetic checks the controller adds; they are never filtered out by --checks.
REACHABLE_CHECK = "verify.reachable"
TASK_CHECK = "verify.task"
SILENT_CHECK = "verify.results"
_STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow"}
_ORDER = {"fail": 0, "pass": 1, "skip": 2}


@dataclass(frozen=True)
class CheckResult:
    host: str
    check: str
    status: str  # pass | fail | skip
    detail: str
    seconds: float = 0.0

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> CheckResult:
        """One collected ``nodeprep_check`` result; an unknown status is reported as a fail."""
        status = str(raw.get("status", ""))
        detail = str(raw.get("detail") or "")
        if status not in STATUSES:
            detail = f"unknown status {status!r} from the node: {detail}"
            status = "fail"
        if status == "skip" and not detail.strip():
            status, detail = "fail", "skipped without a reason; a skip must say why"
        return cls(
            host=str(raw.get("host", "")),
            check=str(raw.get("check", "")),
            status=status,
            detail=detail,
            seconds=float(raw.get("seconds") or 0.0),
        )


def selected(check: str, selectors: Iterable[str]) -> bool:
    """``--checks heartbeat`` selects every heartbeat.* check; a full name selects one."""
    wanted = tuple(selectors)
    if not wanted or check.startswith("verify."):
        return True
    return any(check == name or check.startswith(name + ".") for name in wanted)


@dataclass
class Report:
    """Every check result of one verify run, across hosts."""

    results: list[CheckResult] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @classmethod
    def build(
        cls,
        raw_results: Iterable[Mapping[str, Any]],
        hosts: Iterable[str],
        unreachable: Mapping[str, str],
        task_errors: Iterable[tuple[str, str, str]],
        selectors: Iterable[str] = (),
    ) -> Report:
        """Assemble the report; ``task_errors`` are (host, task, message) failed outside checks."""
        chosen = tuple(selectors)
        results = [CheckResult.from_raw(r) for r in raw_results]
        results = [r for r in results if selected(r.check, chosen)]
        for host, message in sorted(unreachable.items()):
            results.append(CheckResult(host, REACHABLE_CHECK, "fail", f"unreachable: {message}"))
        for host, task, message in task_errors:
            detail = f"task {task!r} failed outside any check: {message}"
            results.append(CheckResult(host, TASK_CHECK, "fail", detail))
        reported = {r.host for r in results}
        for host in hosts:
            if host not in reported:
                detail = "no check reported anything on this host; run with -v to see why"
                results.append(CheckResult(host, SILENT_CHECK, "fail", detail))
        return cls(results=results, unreachable=sorted(unreachable))

    @property
    def hosts(self) -> list[str]:
        return sorted({r.host for r in self.results})

    @property
    def checks(self) -> list[str]:
        """Check names, those failing anywhere first, then by name."""
        worst: dict[str, int] = {}
        for r in self.results:
            worst[r.check] = min(worst.get(r.check, 9), _ORDER[r.status])
        return sorted(worst, key=lambda name: (worst[name], name))

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def exit_code(self) -> int:
        if self.unreachable:
            return EXIT_UNREACHABLE
        return EXIT_FAILED if self.count("fail") else EXIT_OK

    def ordered(self) -> list[CheckResult]:
        """Failures first, then passes, then skips; by host and check within each."""
        return sorted(self.results, key=lambda r: (_ORDER[r.status], r.host, r.check))

    def verdict(self) -> str:
        counts = ", ".join(f"{self.count(s)} {s}" for s in STATUSES)
        if self.unreachable:
            return f"UNREACHABLE: {', '.join(self.unreachable)} ({counts})"
        if self.count("fail"):
            return f"FAILED ({counts})"
        word = "PASSED" if self.count("pass") else "NOTHING CHECKED, every check skipped"
        return f"{word} ({counts})"


def from_run(result: RunResult, hosts: Iterable[str], selectors: Iterable[str] = ()) -> Report:
    """Checks from the run, plus unreachable hosts and task failures no rescue caught."""
    chosen_hosts = tuple(hosts)
    unreachable: dict[str, str] = {}
    errors: list[tuple[str, str, str]] = []
    for host, recap in result.recap.items():
        mine = [f for f in result.failures if f.host == host]
        if recap.unreachable:
            unreachable[host] = next((f.message for f in mine if f.unreachable), "no message")
        elif recap.failed:
            # Stats count only failures no rescue caught; the last one ended the host's play.
            last = [f for f in mine if not f.unreachable][-1:]
            errors += [(host, f.task, f.message) for f in last]
    if not result.recap and result.rc != 0:
        errors += [
            (host, "ansible-playbook", f"exit {result.rc}, {result.status}")
            for host in chosen_hosts
        ]
    return Report.build(result.results, chosen_hosts, unreachable, errors, selectors)


def render(console: Console, report: Report) -> None:
    """The hosts x checks table, then every failure and skip with its detail."""
    table = Table(title="nodeprep verify", show_lines=False)
    table.add_column("check")
    for host in report.hosts:
        table.add_column(host, justify="center")
    cells = {(r.host, r.check): r for r in report.results}
    for check in report.checks:
        row: list[Text | str] = [check]
        for host in report.hosts:
            found = cells.get((host, check))
            row.append(Text(found.status, style=_STYLE[found.status]) if found else "-")
        table.add_row(*row)
    console.print(table)
    for r in report.ordered():
        if r.status == "pass":
            continue
        label = "FAIL" if r.status == "fail" else "skip"
        line = Text(f"{label} {r.host} {r.check}: ", style=_STYLE[r.status])
        line.append(r.detail, style="")
        console.print(line, soft_wrap=True)
    console.print(f"nodeprep verify: {report.verdict()}, exit {report.exit_code}", markup=False)


def to_json(report: Report) -> dict[str, Any]:
    return {
        "exit_code": report.exit_code,
        "seconds": round(report.seconds, 3),
        "counts": {s: report.count(s) for s in STATUSES},
        "unreachable": report.unreachable,
        "results": [asdict(r) for r in report.ordered()],
    }


def to_junit(report: Report, name: str = "nodeprep verify") -> str:
    """JUnit XML as CI systems read it: one testsuite per host, one testcase per check."""
    root = ET.Element("testsuites", name=name, time=_secs(report.seconds))
    root.set("tests", str(len(report.results)))
    root.set("failures", str(report.count("fail")))
    root.set("errors", "0")
    for host in report.hosts:
        mine = sorted((r for r in report.results if r.host == host), key=lambda r: r.check)
        suite = ET.SubElement(root, "testsuite", name=host, hostname=host)
        suite.set("tests", str(len(mine)))
        suite.set("failures", str(sum(r.status == "fail" for r in mine)))
        suite.set("errors", "0")
        suite.set("skipped", str(sum(r.status == "skip" for r in mine)))
        suite.set("time", _secs(sum(r.seconds for r in mine)))
        for r in mine:
            case = ET.SubElement(suite, "testcase", name=r.check, time=_secs(r.seconds))
            case.set("classname", f"{host}.{r.check.split('.', 1)[0]}")
            if r.status == "fail":
                ET.SubElement(case, "failure", message=r.detail, type="check").text = r.detail
            elif r.status == "skip":
                ET.SubElement(case, "skipped", message=r.detail)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _secs(value: float) -> str:
    return f"{max(value, 0.0):.3f}"
