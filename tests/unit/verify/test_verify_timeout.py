"""A hung check fails as "timed out after N s" and the run goes on (real ansible-runner)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from nodeprep import report, runner

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("fast", [False, True], ids=["linear", "mitogen"])
def test_hung_probe_fails_as_timed_out_and_run_continues(
    local_inventory: Path, tmp_path: Path, fast: bool
) -> None:
    pid_file = tmp_path / "hung.pid"
    started = time.monotonic()
    request = runner.RunRequest(
        playbook=Path(__file__).with_name("hung_check.yml"),
        inventory=local_inventory,
        fast=fast,
        extra_vars={"hung_pid_file": str(pid_file)},
    )
    try:
        result = runner.run(request)
    finally:
        _end_probe(pid_file)
    elapsed = time.monotonic() - started
    built = report.Report.build(result.results, ("localhost",), {}, [])
    by_check = {r.check: r for r in built.results}
    assert by_check["hang.probe"].status == "fail"
    assert by_check["hang.probe"].detail.startswith("timed out after 2 s"), by_check["hang.probe"]
    assert by_check["hang.after"].status == "pass"
    assert built.exit_code == 1
    assert result.recap["localhost"].failed == 0  # rescued: the host's play went on
    assert elapsed < 60, f"the hung probe held the run for {elapsed:.0f} s"


def _end_probe(pid_file: Path) -> None:
    """End the hung probe this test started (its pid, as it recorded it), if still there."""
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
