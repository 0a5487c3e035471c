"""Output that is not a terminal (a log, CI) shows a long step is alive: a "still ..." line
after every quiet period, and none while other lines keep coming."""

from __future__ import annotations

import io
import time

from rich.console import Console

from nodeprep.cli.progress import ProgressView, Ticker
from nodeprep.runner import Progress


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=200), out


def test_a_quiet_step_gets_a_line_per_quiet_period_and_a_busy_one_none() -> None:
    console, out = _console()
    with Ticker(console, lambda: "copying the image", quiet_s=0.3) as ticker:
        time.sleep(1.0)
        ticker.mark()  # the busy part starts now: a tick of the quiet part cannot fall into it
        quiet = out.getvalue().splitlines()
        for _ in range(16):  # lines printed far more often than the quiet period
            time.sleep(0.05)
            ticker.mark()
    busy = out.getvalue().splitlines()[len(quiet) :]
    assert 2 <= len(quiet) <= 3, quiet
    assert all(line.startswith("  ... still copying the image (") for line in quiet), quiet
    assert busy == [], busy


def test_the_progress_view_names_the_task_that_is_running() -> None:
    console, out = _console()
    view = ProgressView(console, ("node1",), quiet_s=0.3)
    with view:
        view(Progress(task="Copy the image", role="apptainer"))
        time.sleep(0.8)
    lines = out.getvalue().splitlines()
    assert lines[0] == "TASK [apptainer : Copy the image]"
    assert lines[1].startswith("  ... still running TASK [apptainer : Copy the image] ("), lines


def test_a_step_that_prints_nothing_restarts_the_clock_but_not_the_quiet_period() -> None:
    console, out = _console()
    with Ticker(console, lambda: "verifying", quiet_s=0.4) as ticker:
        for _ in range(6):  # silent steps starting every 0.15 s
            time.sleep(0.15)
            ticker.mark(restart=True, printed=False)
    lines = out.getvalue().splitlines()
    assert lines, "silent steps hid a quiet period"
    assert all(line.startswith("  ... still verifying (0 s so far)") for line in lines), lines
