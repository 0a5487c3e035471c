"""The free-space probe on a real filesystem (a 16 MiB tmpfs) filled at a steady rate.

The probe's clock is the test's, so a fill of a few MiB stands for minutes of checkpoints;
the bytes, the statvfs readings and the trip are real.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hb_support import RunningDaemon, wait_for
from prometheus_client.parser import text_string_to_metric_families

from nodeprep import contract
from nodeprep.heartbeat import config as config_mod
from nodeprep.heartbeat import metrics
from nodeprep.heartbeat.free_space import FreeSpaceCheck
from nodeprep.heartbeat.state import State
from tmpfs import mounted_tmpfs

MIB = 2**20


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "16m") as mount_point:
        yield mount_point


def probe(directory: Path, **overrides: Any) -> dict[str, Any]:
    return {"name": "ckpt-disk", "type": "free_space", "path": str(directory), **overrides}


def fill(path: Path, mib: int, name: str) -> None:
    (path / name).write_bytes(b"\0" * (mib * MIB))


def test_fill_rate_time_until_full_and_levels_as_the_disk_fills(disk: Path) -> None:
    cfg = config_mod.parse({"probes": [probe(disk, warn_percent=25, critical_percent=10)]})
    now = [1000.0]
    check = FreeSpaceCheck(cfg.probes[0], clock=lambda: now[0])
    first = check.attempt()
    assert first.ok
    assert first.evidence == f"ok: {disk}: 16.00 MiB free of 16.00 MiB"
    assert check.reading is not None
    assert check.reading.fill_rate_bytes_per_s is None  # one reading: no rate yet
    for minute in range(1, 4):  # 4 MiB a minute
        fill(disk, 4, f"ckpt-{minute}")
        now[0] += 60
        outcome = check.attempt()
    reading = check.reading
    assert reading is not None
    assert reading.free_bytes == 4 * MIB
    assert reading.fill_rate_bytes_per_s == pytest.approx(4 * MIB / 60)
    assert reading.seconds_until_full == pytest.approx(60.0)  # 4 MiB left at 4 MiB/min
    assert (reading.level, outcome.ok) == ("ok", True)  # exactly 25 %: not below it
    fill(disk, 1, "log")
    now[0] += 15
    assert (check.attempt().ok, check.reading.level) == (True, "warning")
    fill(disk, 2, "ckpt-4")
    now[0] += 30
    critical = check.attempt()
    assert not critical.ok
    assert critical.evidence.startswith("critical: ")
    assert "full in" in critical.evidence


def test_a_critical_disk_trips_and_the_trainer_saves_while_it_still_can(
    disk: Path,
    run_daemon: Callable[..., RunningDaemon],
    start_trainer: Callable[..., tuple[subprocess.Popen[bytes], Path]],
) -> None:
    _, run_dir = start_trainer("filling")
    hb = run_daemon({"probes": [probe(disk, interval=0.2, timeout=0.2, fail_threshold=2,
                                      critical_bytes=4 * MIB, warn_bytes=8 * MIB)]})  # fmt: skip
    wait_for(lambda: hb.daemon.disk_checks[0].reading, 5, "a first reading")
    fill(disk, 13, "checkpoints")
    wait_for(lambda: hb.trips, 10, "a trip on the critical disk")
    assert "critical" in hb.trips[0][2]
    records = wait_for(lambda: contract.read_emergency_records(run_dir), 10, "the checkpoint")
    assert len(records) == 1
    text = metrics.render(hb.daemon.snapshot())
    families = {f.name: f for f in text_string_to_metric_families(text)}
    free = families["nodeprep_heartbeat_disk_free_bytes"].samples[0]
    assert free.labels == {"probe": "ckpt-disk", "path": str(disk)}
    assert free.value == 3 * MIB
    levels = {s.labels["level"]: s.value for s in families["nodeprep_heartbeat_disk_level"].samples}
    assert levels == {"ok": 0.0, "warning": 0.0, "critical": 1.0}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"critical_percent": 20, "warn_percent": 10},
            "critical_percent: 20 is above warn_percent",
        ),
        ({"critical_bytes": 10, "warn_bytes": 5}, "critical_bytes: 10 is above warn_bytes 5"),
        ({"warn_percent": 150}, "warn_percent: must be a percentage 0-100, got 150"),
        ({"critical_bytes": -1}, "critical_bytes: must be 0 .off. or a number of bytes"),
        ({"path": "relative/dir"}, "path: needs an absolute directory path"),
        ({"window_s": 0}, "window_s: must be a positive number"),
    ],
)
def test_bad_free_space_settings_are_named(
    overrides: dict[str, Any], message: str, tmp_path: Path
) -> None:
    with pytest.raises(config_mod.ConfigError, match=r"probes\[0\]\." + message):
        config_mod.parse({"probes": [probe(tmp_path, **overrides)]})


def test_a_missing_directory_is_named_before_the_daemon_starts(tmp_path: Path) -> None:
    with pytest.raises(config_mod.ConfigError, match="is not a directory; create it"):
        config_mod.parse({"probes": [probe(tmp_path / "gone")]})


def test_without_readings_no_disk_metrics_are_written() -> None:
    text = metrics.render(metrics.Snapshot([], State.HEALTHY))
    assert "disk_free_bytes" not in text
