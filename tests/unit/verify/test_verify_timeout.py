"""A hung check fails as "timed out after N s" and the run goes on (real ansible-runner)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nodeprep import report, runner

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("fast", [False, True], ids=["linear", "mitogen"])
def test_hung_probe_fails_as_timed_out_and_run_continues(local_inventory: Path, fast: bool) -> None:
    started = time.monotonic()
    request = runner.RunRequest(
        playbook=Path(__file__).with_name("hung_check.yml"), inventory=local_inventory, fast=fast
    )
    result = runner.run(request)
    elapsed = time.monotonic() - started
    built = report.Report.build(result.results, ("localhost",), {}, [])
    by_check = {r.check: r for r in built.results}
    assert by_check["hang.probe"].status == "fail"
    assert by_check["hang.probe"].detail.startswith("timed out after 2 s"), by_check["hang.probe"]
    assert by_check["hang.after"].status == "pass"
    assert built.exit_code == 1
    assert result.recap["localhost"].failed == 0  # rescued: the host's play went on
    assert elapsed < 60, f"the hung probe held the run for {elapsed:.0f} s"
