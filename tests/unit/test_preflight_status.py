"""preflight_status's judgement, fed the states a node can be in (the probes run in the
integration tier's provision and verify tests)."""

from __future__ import annotations

from typing import Any

from collection_plugins import load

preflight = load("preflight_status")
EXPECT: dict[str, Any] = {
    "min_python": "3.8",
    "supported_distributions": ["Debian 12", "Ubuntu 22.04"],
    "min_free_gb": 10,
    "disk_paths": ["/", "/data"],
    "time_sync_required": True,
    "time_sync_services": ["chrony", "systemd-timesyncd"],
}
GIB = 1 << 30


def test_os_matches_by_major_or_full_version_and_names_the_supported_list() -> None:
    debian = {"distribution": "Debian", "distribution_version": "12.7",
              "distribution_major_version": "12"}  # fmt: skip
    ubuntu = {"distribution": "Ubuntu", "distribution_version": "22.04",
              "distribution_major_version": "22"}  # fmt: skip
    rocky = {"distribution": "Rocky", "distribution_version": "9.4",
             "distribution_major_version": "9"}  # fmt: skip
    assert preflight.judge_os(EXPECT, debian)["passed"] is True
    assert preflight.judge_os(EXPECT, ubuntu)["passed"] is True
    refused = preflight.judge_os(EXPECT, rocky)
    assert refused["passed"] is False
    assert refused["detail"] == (
        "The operating system Rocky 9.4 is not supported (supported: Debian 12, Ubuntu 22.04); "
        "run nodeprep on a supported distribution."
    )


def test_python_below_the_minimum_fails_and_says_how_to_fix_it() -> None:
    assert preflight.judge_python(EXPECT, (3, 11, 2))["detail"] == "Python 3.11.2 >= 3.8"
    old = preflight.judge_python({**EXPECT, "min_python": "3.12"}, (3, 11, 2))
    assert old["passed"] is False
    assert "older than 3.12; install python3 3.12 or newer" in old["detail"]


def test_disk_names_every_short_or_missing_path() -> None:
    free = {"/": (50 * GIB, ""), "/data": (3 * GIB, "")}
    short = preflight.judge_disk(EXPECT, free)
    assert short["passed"] is False
    assert short["detail"] == (
        "The filesystem of /data has 3.0 GiB free, less than preflight_min_free_gb=10 GiB; "
        "free space there or lower the threshold."
    )
    missing = preflight.judge_disk(EXPECT, {"/": (50 * GIB, ""), "/data": (None, "No such file")})
    assert "The path /data cannot be checked (No such file)" in missing["detail"]
    fine = preflight.judge_disk(EXPECT, {"/": (50 * GIB, ""), "/data": (10 * GIB, "")})
    assert fine == {"check": "preflight.disk", "passed": True,
                    "detail": "/, /data each have at least 10 GiB free"}  # fmt: skip


def test_time_sync_reads_systemctl_per_unit_and_tells_a_hang_from_none_running() -> None:
    running = preflight.judge_time_sync(EXPECT, (0, "inactive\nactive\n", ""), 60)
    assert running["passed"] is True
    assert running["detail"] == "systemd-timesyncd is running"
    none = preflight.judge_time_sync(EXPECT, (3, "inactive\ninactive\n", ""), 60)
    assert none["passed"] is False
    assert none["detail"].startswith(
        "No time synchronisation service is running (looked for chrony, systemd-timesyncd); "
    )
    hung = preflight.judge_time_sync(EXPECT, (124, "", ""), 7)
    assert "systemctl timed out after 7 s" in hung["detail"]
    no_systemd = (1, "", "System has not been booted with systemd")
    broken = preflight.judge_time_sync(EXPECT, no_systemd, 7)
    assert "systemctl said: System has not been booted with systemd" in broken["detail"]
    off = preflight.judge_time_sync({**EXPECT, "time_sync_required": "false"}, None, 60)
    assert off["skip"] == "preflight_time_sync_required was false when this node was provisioned"
