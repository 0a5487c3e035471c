"""The heartbeat drill: stop a probe target under a running trainer and see the checkpoint land.

A private heartbeat daemon (the real one, with its own config, registry and metrics file, so
the node's installed watchdog and its real targets are left alone) probes a TCP target this
drill owns. A reference trainer registers in the same registry. The drill closes the target;
the daemon must trip, send SIGUSR1, and the trainer must commit an emergency checkpoint and
record it in emergency.jsonl before the deadline.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from nodeprep import contract


@dataclass
class HeartbeatDrillResult:
    passed: bool
    detail: str
    seconds: float
    stop_to_commit_s: float | None = None
    signal_to_commit_s: float | None = None


class _Target:
    """A TCP listener on loopback that accepts and closes connections until stopped."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.close()

    def stop(self) -> None:
        self.sock.close()


def _daemon_config(work: Path, port: int) -> Path:
    path = work / "heartbeat.json"
    probe = {"name": "drill-target", "type": "tcp", "host": "127.0.0.1", "port": port,
             "interval": 0.5, "timeout": 0.4, "fail_threshold": 2}  # fmt: skip
    config = {
        "registry_dir": str(work / "trainers"),
        "metrics": {"path": str(work / "heartbeat.prom"), "interval_s": 1},
        "actions": {"signal_trainers": True, "pause_trainers": False},
        "probes": [probe],
    }
    path.write_text(json.dumps(config))
    return path


def _start(argv: list[str], work: Path, log_name: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NODEPREP_RUN_DIR": str(work)}
    with open(work / log_name, "wb") as log:
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _wait(predicate: object, deadline: float, step_s: float = 0.2) -> bool:
    assert callable(predicate)
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return bool(predicate())


def run_heartbeat_drill(work: Path, python: str, deadline_s: float = 120.0) -> HeartbeatDrillResult:
    started = time.monotonic()
    deadline = started + deadline_s
    work.mkdir(parents=True, exist_ok=True)
    run_dir = work / "run"
    target = _Target()
    trainer_argv = [python, "-m", "nodeprep.trainer", "--run-dir", str(run_dir), "--steps",
                    "1000000", "--checkpoint-every", "100000", "--model-mb", "0.25",
                    "--threads", "1", "--log-every", "100"]  # fmt: skip
    daemon_argv = [
        python,
        "-m",
        "nodeprep.heartbeat",
        "--config",
        str(_daemon_config(work, target.port)),
    ]
    daemon = _start(daemon_argv, work, "heartbeat.log")
    trainer = _start(trainer_argv, work, "trainer.log")
    try:
        registry = work / "trainers"
        if not _wait(lambda: bool(contract.registered_trainers(registry)), deadline):
            return _result(False, "the trainer never registered with the heartbeat", started)
        time.sleep(2.0)  # a few healthy probe rounds before the target goes away
        target.stop()
        stopped = time.time()
        landed = _wait(lambda: bool(contract.read_emergency_records(run_dir)), deadline)
        if not landed:
            log = (work / "heartbeat.log").read_text(errors="replace").strip().splitlines()[-3:]
            why = f"heartbeat log: {' | '.join(log) or 'empty'}"
            return _result(
                False, f"no emergency checkpoint after the target stopped; {why}", started
            )
        record = contract.read_emergency_records(run_dir)[0]
        detail = (
            f"stopped the probe target 127.0.0.1:{target.port}; emergency checkpoint "
            f"{Path(record.path).name} (step {record.step}) committed "
            f"{record.committed_time - stopped:.2f} s later, "
            f"{record.committed_time - record.signal_time:.2f} s after {record.signal}"
        )
        found = _result(True, detail, started)
        found.stop_to_commit_s = round(record.committed_time - stopped, 3)
        found.signal_to_commit_s = round(record.committed_time - record.signal_time, 3)
        return found
    finally:
        target.stop()
        for proc, sig in ((trainer, signal.SIGKILL), (daemon, signal.SIGTERM)):
            if proc.poll() is None:
                os.killpg(proc.pid, sig)
            proc.wait(timeout=30)


def _result(passed: bool, detail: str, started: float) -> HeartbeatDrillResult:
    return HeartbeatDrillResult(passed, detail, round(time.monotonic() - started, 3))
