"""Actions against real processes: SIGUSR1 to registered trainers, pause, tmux, webhook."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hb_endpoints import Endpoint, http_probe
from hb_support import RunningDaemon, wait_for

from nodeprep import contract

TrainerStarter = Callable[[str], tuple[subprocess.Popen[bytes], Path]]


def _probe(endpoint: Endpoint) -> dict[str, Any]:
    return http_probe(endpoint, 0.3, 0.2, 2)


def _proc_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_sigusr1_reaches_every_registered_trainer_which_commits_a_checkpoint(
    endpoint: Endpoint,
    run_daemon: Callable[..., RunningDaemon],
    start_trainer: TrainerStarter,
    tmp_path: Path,
) -> None:
    first, first_dir = start_trainer("a")
    second, second_dir = start_trainer("b")
    stale = tmp_path / "run" / "trainers" / "999999.json"
    stale.write_text(contract.Registration(999999, str(tmp_path / "gone"), 0.0).to_json())
    hb = run_daemon({"probes": [_probe(endpoint)]})
    endpoint.set_mode("error")
    wait_for(lambda: hb.trips, 5, "a trip")
    for run_dir in (first_dir, second_dir):
        records = wait_for(
            lambda d=run_dir: contract.read_emergency_records(d),
            5,
            f"an emergency record in {run_dir}",
        )
        assert len(records) == 1
        assert Path(records[0].path).is_file()
        assert records[0].signal_time >= hb.trips[0][0] - 0.05
    latency = wait_for(
        lambda: hb.daemon.actions.ledger.last_checkpoint_latency_s, 5, "the checkpoint latency"
    )
    assert 0 < latency < 10  # signal -> next step boundary -> fsync; seconds only if stuck
    assert hb.daemon.actions.ledger.total["signal_trainer"] == 2
    assert first.poll() is None
    assert second.poll() is None


def test_pause_after_checkpoint_and_resume_on_recovery(
    endpoint: Endpoint, run_daemon: Callable[..., RunningDaemon], start_trainer: TrainerStarter
) -> None:
    proc, run_dir = start_trainer("p")
    hb = run_daemon(
        {"probes": [_probe(endpoint)], "actions": {"pause_trainers": True, "pause_wait_s": 5}}
    )
    endpoint.set_mode("refuse")
    wait_for(lambda: contract.read_emergency_records(run_dir), 5, "the emergency checkpoint")
    wait_for(lambda: _proc_state(proc.pid) == "T", 5, "the trainer to be paused")
    endpoint.set_mode("ok")
    wait_for(lambda: hb.daemon.actions.ledger.total.get("recover"), 5, "recovery")
    wait_for(lambda: _proc_state(proc.pid) in "SR", 5, "the trainer to resume")


TRAP_SCRIPT = """
import os, signal, sys, time
def got(sig, frame):
    # Written aside and renamed: the test may see the marker the moment it exists.
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write("SIGINT")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    sys.exit(0)
signal.signal(signal.SIGINT, got)
open(sys.argv[1] + ".ready", "w").write("ready")
while True:
    time.sleep(0.1)
"""


@pytest.fixture
def tmux_session(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real tmux server on a private socket, running a job that records SIGINT."""
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.fail("tmux is not installed; add it with apt-get install tmux")
    sock = str(tmp_path / "tmux.sock")
    marker = tmp_path / "sigint"
    script = tmp_path / "job.py"
    script.write_text(TRAP_SCRIPT)
    cmd = f"{sys.executable} {script} {marker}"
    subprocess.run(
        [tmux, "-S", sock, "-f", "/dev/null", "new-session", "-d", "-s", "train", cmd],
        check=True,
        timeout=10,
    )
    try:
        wait_for(lambda: Path(f"{marker}.ready").exists(), 10, "the tmux job to start")
        yield sock, marker
    finally:
        subprocess.run([tmux, "-S", sock, "kill-server"], check=False, timeout=10)


def test_tmux_fallback_interrupts_a_job_even_in_copy_mode(
    endpoint: Endpoint,
    run_daemon: Callable[..., RunningDaemon],
    tmux_session: tuple[str, Path],
) -> None:
    sock, marker = tmux_session
    subprocess.run(["tmux", "-S", sock, "copy-mode", "-t", "train"], check=True, timeout=10)
    in_mode = subprocess.run(
        ["tmux", "-S", sock, "display", "-p", "-t", "train", "#{pane_in_mode}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert in_mode.stdout.strip() == "1"
    hb = run_daemon(
        {
            "probes": [_probe(endpoint)],
            "actions": {"signal_trainers": False, "tmux": {"session": "train", "socket": sock}},
        }
    )
    endpoint.set_mode("error")
    wait_for(marker.exists, 5, "the job in tmux to get SIGINT")
    assert marker.read_text() == "SIGINT"
    # The job can see SIGINT before the daemon has recorded the action: wait for both.
    ledger = hb.daemon.actions.ledger.total
    wait_for(lambda: ledger.get("tmux_send_keys") == 1, 5, "the action to be recorded")


class _Hook(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        type(self).received.append(json.loads(self.rfile.read(length)))
        self.send_response(204)
        self.end_headers()


def test_webhook_gets_trip_and_recovery_and_a_dead_one_blocks_nothing(
    endpoint: Endpoint, run_daemon: Callable[..., RunningDaemon]
) -> None:
    _Hook.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        hook = f"http://127.0.0.1:{server.server_address[1]}/hook"
        run_daemon(
            {"probes": [_probe(endpoint)], "actions": {"webhook": {"url": hook, "timeout_s": 1}}}
        )
        endpoint.set_mode("error")
        wait_for(lambda: _Hook.received, 5, "the trip webhook")
        endpoint.set_mode("ok")
        wait_for(lambda: len(_Hook.received) == 2, 5, "the recovery webhook")
    finally:
        server.shutdown()
        server.server_close()
    trip, recover = _Hook.received
    assert (trip["event"], trip["probe"], recover["event"]) == ("trip", "web", "recover")
    assert "HTTP 503" in trip["evidence"]
    assert trip["host"] == os.uname().nodename
    dead = run_daemon(
        {"probes": [_probe(endpoint)], "actions": {"webhook": {"url": hook, "timeout_s": 1}}}
    )
    endpoint.set_mode("refuse")
    wait_for(lambda: dead.trips, 5, "a trip with a dead webhook")
    endpoint.set_mode("ok")
    wait_for(lambda: dead.daemon.actions.ledger.total.get("recover"), 5, "recovery")
