"""Live progress of a playbook run, and the recap at its end (terminal output lives here)."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from nodeprep.runner import Progress, RunRequest, RunResult

_COUNTED = ("ok", "changed", "failed", "unreachable")
# Without a terminal (a log, CI), a long step prints a line at least this often.
QUIET_S = 30.0


class Ticker:
    """Says "still ..." after every QUIET_S seconds in which nothing else was printed.

    For output that is not a terminal, where no live status shows that a long step (an
    image build, a large copy to the nodes) is alive. WHAT names the step in progress.
    """

    def __init__(self, console: Console, what: Callable[[], str], quiet_s: float = QUIET_S):
        self.console, self.what, self.quiet_s = console, what, quiet_s
        self.started = self.last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nodeprep-ticker", daemon=True)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def mark(self, restart: bool = False, printed: bool = True) -> None:
        """Something was PRINTED, and with RESTART a new step began (its clock restarts)."""
        now = time.monotonic()
        if printed:
            self.last = now
        if restart:
            self.started = now

    def _loop(self) -> None:
        while not self._stop.wait(min(1.0, self.quiet_s)):
            now = time.monotonic()
            if now - self.last >= self.quiet_s:
                self.last = now
                self.console.print(
                    f"  ... still {self.what()} ({now - self.started:.0f} s so far)",
                    markup=False,
                    soft_wrap=True,
                )


@dataclass
class _HostLine:
    task: str = ""
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_COUNTED, 0))


class ProgressView:
    """A live per-host table on a terminal; one line per task and per failure otherwise."""

    def __init__(self, console: Console, hosts: tuple[str, ...], quiet_s: float = QUIET_S) -> None:
        self.console, self.quiet_s = console, quiet_s
        self.hosts = {host: _HostLine() for host in hosts}
        self.current = ""
        self.live: Live | None = None
        self.ticker: Ticker | None = None

    def __enter__(self) -> ProgressView:
        if self.console.is_terminal:
            self.live = Live(
                self._table(), console=self.console, refresh_per_second=4, transient=True
            )
            self.live.__enter__()
        else:
            self.ticker = Ticker(
                self.console, lambda: f"running TASK [{self.current}]", self.quiet_s
            )
            self.ticker.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.live is not None:
            self.live.__exit__(kind, exc, tb)
        if self.ticker is not None:
            self.ticker.__exit__(kind, exc, tb)

    def __call__(self, item: Progress) -> None:
        label = f"{item.role} : {item.task}" if item.role else item.task
        if item.host is None:
            self.current = label
            for line in self.hosts.values():
                line.task = label
            if self.live is None:
                self.console.print(f"TASK [{label}]", markup=False, soft_wrap=True)
            if self.ticker is not None:
                self.ticker.mark(restart=True)
        else:
            line = self.hosts.setdefault(item.host, _HostLine())
            if item.outcome in line.counts:
                line.counts[item.outcome] += 1
            if item.outcome in ("failed", "unreachable") and self.live is None:
                self.console.print(
                    f"  {item.outcome.upper()}: {item.host}: {item.message}",
                    markup=False,
                    soft_wrap=True,
                )
                if self.ticker is not None:
                    self.ticker.mark()
        if self.live is not None:
            self.live.update(self._table())

    def _table(self) -> Table:
        table = Table(title=f"running: {self.current}" if self.current else None)
        table.add_column("host")
        table.add_column("task")
        for name in _COUNTED:
            table.add_column(name, justify="right")
        for host, line in self.hosts.items():
            table.add_row(host, line.task, *(str(line.counts[n]) for n in _COUNTED))
        return table


def print_recap(console: Console, result: RunResult) -> None:
    table = Table(title="recap")
    table.add_column("host")
    for name in ("ok", "changed", "failed", "unreachable", "skipped"):
        table.add_column(name, justify="right")
    for host, recap in sorted(result.recap.items()):
        table.add_row(host, *(str(v) for v in asdict(recap).values()))
    console.print(table)
    for host, tasks in sorted(changed_tasks(result).items()):
        console.print(
            f"CHANGED {host} ({len(tasks)}): {'; '.join(tasks)}", markup=False, soft_wrap=True
        )
    for failure in result.failures:
        kind = "UNREACHABLE" if failure.unreachable else "FAILED"
        where = f"{failure.role} : {failure.task}" if failure.role else failure.task
        console.print(
            f"{kind} {failure.host} [{where}]: {failure.message}", markup=False, soft_wrap=True
        )


def changed_tasks(result: RunResult) -> dict[str, list[str]]:
    """Host -> the tasks that changed it, as ``role : task``, in the order they ran."""
    found: dict[str, list[str]] = {}
    for change in result.changes:
        where = f"{change.role} : {change.task}" if change.role else change.task
        found.setdefault(change.host, []).append(where)
    return found


def summary(request: RunRequest, result: RunResult, seconds: float) -> dict[str, Any]:
    return {
        "playbook": str(request.playbook),
        "inventory": str(request.inventory),
        "limit": request.limit,
        "check": request.check,
        "status": result.status,
        "exit_code": result.exit_code,
        "seconds": round(seconds, 3),
        "hosts": {host: asdict(recap) for host, recap in sorted(result.recap.items())},
        "failures": [asdict(f) for f in result.failures],
        "changed_tasks": changed_tasks(result),
        "unreachable": result.unreachable_hosts,
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically, so a reader never sees half a summary."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)
