"""The role and the daemon under a real systemd (PID 1 of a booted container).

Run in file order against one container: converge, idempotence, hardening score, SIGUSR1
to a trainer of another user, watchdog restart of a frozen daemon, bad config refused.
The trainer here is the dummy from tests/unit/heartbeat; the end-to-end test with the real
``nodeprep.trainer`` belongs to integration once that trainer exists.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hb_converge import REPO, Converge, Converger
from hb_endpoints import Endpoint

from nspawn_node import Container

pytestmark = pytest.mark.integration
UNIT = "nodeprep-heartbeat.service"
CONFIG = "/etc/nodeprep/heartbeat.json"
VENV = "/opt/nodeprep/heartbeat-venv"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[Endpoint]:
    ep = Endpoint().start()
    try:
        yield ep
    finally:
        ep.stop()


def _vars(wheel: Path, endpoint: Endpoint, **override: Any) -> dict[str, Any]:
    variables: dict[str, Any] = {
        "heartbeat_package_wheel": str(wheel),
        "heartbeat_watchdog_sec": 3,
        "heartbeat_metrics_interval_s": 1,
        "heartbeat_actions": {"signal_trainers": True, "min_trip_interval_s": 0},
        "heartbeat_probes": [
            {
                "name": "web",
                "type": "http",
                "url": f"{endpoint.url}/health",
                "interval": 0.5,
                "timeout": 0.3,
                "fail_threshold": 2,
                "recover_threshold": 2,
            },
            {"name": "ckpt", "type": "writable", "path": "/srv/ckpt", "interval": 2},
            {"name": "gpu", "type": "gpu", "interval": 5},
        ],
    }
    variables.update(override)
    return variables


@pytest.fixture(scope="module")
def role_vars(wheel: Path, endpoint: Endpoint) -> dict[str, Any]:
    return _vars(wheel, endpoint)


def _show(box: Container, prop: str) -> str:
    return box.sh(f"systemctl show -P {prop} {UNIT}").stdout.strip()


def _wait(box: Container, predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    journal = box.sh(f"journalctl -u {UNIT} --no-pager -n 40", check=False).stdout
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{journal}")


@pytest.fixture(scope="module")
def first(container: Container, converge: Converger, wheel: Path, endpoint: Endpoint) -> Converge:
    container.sh("mkdir -p /srv/ckpt && chmod 1777 /srv/ckpt")
    result = converge(_vars(wheel, endpoint))
    assert result.rc == 0, result.output[-4000:]
    return result


def test_converges_and_the_service_runs(container: Container, first: Converge) -> None:
    assert first.changed > 0
    _wait(container, lambda: _show(container, "ActiveState") == "active", 30, "active")
    assert _show(container, "Type") == "notify"
    assert _show(container, "User") == "nodeprep-heartbeat"
    assert _show(container, "WatchdogUSec") == "3s"
    prom = container.root / "var/lib/prometheus/node-exporter/nodeprep_heartbeat.prom"
    up = re.compile(r'probe_up\{probe="ckpt",type="writable"\} 1')
    text = _wait(
        container,
        lambda: prom.exists() and up.search(prom.read_text()) and prom.read_text(),
        20,
        "the writable probe up in the metrics",
    )
    assert 'nodeprep_heartbeat_gpu_check_skipped{reason="nvidia-ml-py not installed"} 1' in text


def test_second_converge_changes_nothing(
    container: Container, first: Converge, converge: Converger, wheel: Path, endpoint: Endpoint
) -> None:
    pid = _show(container, "MainPID")
    again = converge(_vars(wheel, endpoint))
    assert again.rc == 0, again.output[-4000:]
    assert again.changed == 0, again.output[-4000:]
    assert _show(container, "MainPID") == pid


def test_sandbox_exposure_is_at_most_2(container: Container, first: Converge) -> None:
    exposure = _exposure(container)
    print(f"systemd-analyze security exposure: {exposure}")
    assert exposure <= 2.0


def test_sigusr1_reaches_a_trainer_running_as_another_user(
    container: Container, first: Converge, endpoint: Endpoint
) -> None:
    trainer = REPO / "tests" / "unit" / "heartbeat" / "dummy_trainer.py"
    (container.root / "opt" / "dummy_trainer.py").write_text(trainer.read_text())
    container.sh(
        "id trainee >/dev/null 2>&1 || useradd --system trainee; "
        "install -d -m 1777 /run/nodeprep /run/nodeprep/trainers"
    )
    container.sh(
        f"systemd-run --unit=dummy-trainer --uid=trainee {VENV}/bin/python "
        "/opt/dummy_trainer.py /srv/ckpt/run"
    )
    # The run dir is outside /tmp: the daemon has a private /tmp and could not read it there.
    run_dir = container.root / "srv/ckpt/run"
    _wait(container, (run_dir / "ready").exists, 20, "the trainer to register")
    try:
        endpoint.set_mode("refuse")
        log = run_dir / "emergency.jsonl"
        record = _wait(
            container, lambda: log.exists() and log.read_text().strip(), 20, "the emergency record"
        )
        assert json.loads(record.splitlines()[0])["signal"] == "SIGUSR1"
        journal = _wait(
            container,
            lambda: (
                (j := container.sh(f"journalctl -u {UNIT} --no-pager", check=False).stdout)
                and "action=checkpoint_committed" in j
                and j
            ),
            10,
            "the committed checkpoint log",
        )
        assert "action=signal_trainer" in journal
    finally:
        endpoint.set_mode("ok")
        container.sh("systemctl stop dummy-trainer", check=False)


def test_watchdog_restarts_a_frozen_daemon(container: Container, first: Converge) -> None:
    _wait(container, lambda: _show(container, "ActiveState") == "active", 30, "active")
    pid = _show(container, "MainPID")
    restarts = int(_show(container, "NRestarts"))
    container.sh(f"kill -STOP {pid}")
    _wait(
        container,
        lambda: (
            _show(container, "MainPID") not in ("0", pid)
            and _show(container, "ActiveState") == "active"
        ),
        30,
        "a new MainPID",
    )
    assert int(_show(container, "NRestarts")) == restarts + 1
    journal = container.sh(f"journalctl -u {UNIT} --no-pager", check=False).stdout
    assert "Watchdog timeout" in journal


def test_bad_config_is_refused_and_the_daemon_keeps_running(
    container: Container, first: Converge, converge: Converger, wheel: Path, endpoint: Endpoint
) -> None:
    _wait(container, lambda: _show(container, "ActiveState") == "active", 30, "active")
    pid = _show(container, "MainPID")
    before = (container.root / CONFIG.lstrip("/")).read_bytes()
    bad = _vars(wheel, endpoint)
    bad["heartbeat_probes"][0]["interval"] = -1
    result = converge(bad)
    assert result.rc != 0
    assert "probes[0].interval: must be a positive number, got -1." in result.output
    assert (container.root / CONFIG.lstrip("/")).read_bytes() == before
    assert _show(container, "MainPID") == pid
    assert _show(container, "ActiveState") == "active"


def _exposure(box: Container) -> float:
    out = box.sh(f"systemd-analyze security --no-pager {UNIT}", check=False).stdout
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out)
    assert found, out[-3000:]
    return float(found.group(1))


def test_with_nvml_the_real_library_reports_no_driver_and_stays_hardened(
    container: Container,
    first: Converge,
    converge: Converger,
    role_vars: dict[str, Any],
    nvml_wheel: Path,
) -> None:
    pid = _show(container, "MainPID")
    result = converge(
        {**role_vars, "heartbeat_nvml_enabled": True, "heartbeat_nvml_wheel": str(nvml_wheel)}
    )
    assert result.rc == 0, result.output[-4000:]
    _wait(container, lambda: _show(container, "MainPID") not in ("0", pid), 30, "a restart")
    prom = container.root / "var/lib/prometheus/node-exporter/nodeprep_heartbeat.prom"
    reason = 'nodeprep_heartbeat_gpu_check_skipped{reason="no NVIDIA driver"} 1'
    _wait(
        container,
        lambda: prom.exists() and reason in prom.read_text(),
        20,
        "the real pynvml to report the missing driver",
    )
    exposure = _exposure(container)
    print(f"systemd-analyze security exposure with NVML devices allowed: {exposure}")
    assert exposure <= 2.0
