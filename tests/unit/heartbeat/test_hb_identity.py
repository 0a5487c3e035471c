"""The watchdog signals only processes whose identity matches their registration.

Regression for a SIGUSR1 that killed an unrelated process: a SIGKILLed trainer left its
``<pid>.json`` behind, the pid was reused, and the watchdog signalled the new owner. The
processes here are real; an unrelated ``sleep`` dies of SIGUSR1's default action, so it
still being alive proves it was never signalled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hb_endpoints import Endpoint, http_probe
from hb_support import RunningDaemon, wait_for

from nodeprep import contract
from nodeprep.heartbeat.actions import Actions, Trip
from nodeprep.heartbeat.config import ActionsConfig

TrainerStarter = Callable[[str], tuple[subprocess.Popen[bytes], Path]]
IGNORED = "nodeprep_heartbeat_registrations_ignored_total"


@pytest.fixture
def unrelated(
    spawn: Callable[..., subprocess.Popen[bytes]],
) -> Callable[[], subprocess.Popen[bytes]]:
    """Unrelated ``sleep`` processes (not trainers), killed by pid whatever the test did."""

    def start() -> subprocess.Popen[bytes]:
        proc = spawn("sleep", "60")
        wait_for(lambda: _stat_fields(proc.pid)[0] in "SR", 5, "sleep to start")
        return proc

    return start


def _stat_fields(pid: int) -> list[str]:
    """Fields 3.. of /proc/PID/stat (after the comm, which may hold spaces and ')')."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _write_record(registry: Path, pid: int, start_ticks: int | None, **extra: Any) -> Path:
    """A registration as a trainer would have left it (written by hand: not by register())."""
    data: dict[str, Any] = {"pid": pid, "run_dir": str(registry / f"run-{pid}"), "started_at": 1.0}
    if start_ticks is not None:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        data |= {"start_ticks": start_ticks, "boot_id": boot}
    data |= extra
    registry.mkdir(parents=True, exist_ok=True)
    path = registry / f"{pid}.json"
    path.write_text(json.dumps(data))
    return path


def _probe(endpoint: Endpoint) -> dict[str, Any]:
    return http_probe(endpoint, 0.2, 0.1, 1)


def _metric(prom: Path, reason: str) -> float | None:
    prefix = f'{IGNORED}{{reason="{reason}"}} '
    text = prom.read_text() if prom.exists() else ""
    values = [float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix)]
    return values[0] if values else None


def _dead_pid() -> int:
    """A pid that was just used and reaped, so nothing owns it (barring instant reuse)."""
    proc = subprocess.Popen(["true"])
    proc.wait(5)
    return proc.pid


def test_reused_pid_is_never_signalled_removed_and_counted(
    endpoint: Endpoint,
    run_daemon: Callable[..., RunningDaemon],
    start_trainer: TrainerStarter,
    unrelated: Callable[[], subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    registry = tmp_path / "run" / "trainers"
    victim = unrelated()
    real_ticks = int(_stat_fields(victim.pid)[19])
    stale = _write_record(registry, victim.pid, real_ticks + 1)
    _trainer, run_dir = start_trainer("genuine")
    prom = tmp_path / "hb.prom"
    hb = run_daemon(
        {
            "probes": [_probe(endpoint)],
            "metrics": {"path": str(prom), "interval_s": 0.1},
            "actions": {"pause_trainers": True, "pause_wait_s": 2},
        }
    )
    endpoint.set_mode("error")
    wait_for(lambda: contract.read_emergency_records(run_dir), 5, "the genuine trainer's save")
    wait_for(lambda: hb.daemon.actions.ledger.total.get("pause_trainer"), 5, "the pause")
    assert victim.poll() is None, f"the unrelated process died: {victim.returncode}"
    assert _stat_fields(victim.pid)[0] in "SR"  # never stopped either
    assert not stale.exists()
    wait_for(lambda: _metric(prom, "pid_reused") == 1, 5, "the ignored count in the metrics")
    assert _metric(prom, "dead_pid") == 0
    assert hb.daemon.actions.ledger.total["signal_trainer"] == 1


def test_dead_pid_registration_is_removed_and_counted(
    endpoint: Endpoint,
    run_daemon: Callable[..., RunningDaemon],
    unrelated: Callable[[], subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    registry = tmp_path / "run" / "trainers"
    stale = _write_record(registry, _dead_pid(), 12345)
    bystander = unrelated()
    old = _write_record(registry, bystander.pid, None)  # pre-identity record: kept, unsent
    prom = tmp_path / "hb.prom"
    hb = run_daemon(
        {"probes": [_probe(endpoint)], "metrics": {"path": str(prom), "interval_s": 0.1}}
    )
    endpoint.set_mode("error")
    wait_for(lambda: hb.trips, 5, "a trip")
    wait_for(lambda: _metric(prom, "dead_pid") == 1, 5, "the dead record counted")
    assert not stale.exists()
    assert old.exists()
    assert _metric(prom, "no_identity") == 1
    assert bystander.poll() is None
    assert "signal_trainer" not in hb.daemon.actions.ledger.total


def test_identity_is_confirmed_again_just_before_the_signal(
    endpoint: Endpoint,
    run_daemon: Callable[..., RunningDaemon],
    unrelated: Callable[[], subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The pid changes owner between the scan and the signal: the signal is not sent."""
    registry = tmp_path / "run" / "trainers"
    victim = unrelated()
    ticks = int(_stat_fields(victim.pid)[19])
    _write_record(registry, victim.pid, ticks + 7)
    scanned = contract.Registration(
        victim.pid, str(tmp_path / "x"), 1.0, start_ticks=ticks + 7, boot_id=contract.boot_id()
    )
    # What the scan saw a moment earlier, when the pid still belonged to the trainer.
    monkeypatch.setattr(
        contract, "scan_registry", lambda *_a, **_k: contract.RegistryScan([scanned], [])
    )
    hb = run_daemon({"probes": [_probe(endpoint)]})
    endpoint.set_mode("error")
    wait_for(lambda: hb.trips, 5, "a trip")
    ledger = hb.daemon.actions.ledger
    wait_for(lambda: ledger.ignored.get("pid_reused"), 5, "the refusal counted")
    assert victim.poll() is None
    assert "signal_trainer" not in ledger.total
    assert not (registry / f"{victim.pid}.json").exists()


def test_resume_sends_sigcont_only_to_a_confirmed_identity(
    unrelated: Callable[[], subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """A paused pid that is now someone else's stays as it is: no SIGCONT for a stranger."""
    stranger = unrelated()
    os.kill(stranger.pid, signal.SIGSTOP)
    wait_for(lambda: _stat_fields(stranger.pid)[0] == "T", 5, "the stranger to stop")
    ticks = int(_stat_fields(stranger.pid)[19])
    actions = Actions(ActionsConfig(), tmp_path / "trainers")
    actions.paused[stranger.pid] = contract.Registration(
        stranger.pid, str(tmp_path), 1.0, start_ticks=ticks - 1, boot_id=contract.boot_id()
    )
    actions.recover(Trip("web", "ok", time.time()))
    time.sleep(0.2)
    assert _stat_fields(stranger.pid)[0] == "T"
    assert actions.ledger.ignored == {"pid_reused": 1}
    assert actions.paused == {}
