"""End to end with the reference trainer: a network fault ends in a verified checkpoint.

Runs only where ``nodeprep.trainer`` is part of the checkout (it comes with the
checkpoint work); elsewhere it skips and says so. The daemon and the trainer are real
processes; the fault is a local endpoint that starts refusing connections.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hb_endpoints import Endpoint

from nodeprep import contract

pytestmark = pytest.mark.integration


def _wait(predicate: object, timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()  # type: ignore[operator]
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def test_fault_to_verified_emergency_checkpoint_with_the_reference_trainer(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    if importlib.util.find_spec("nodeprep.trainer") is None:
        pytest.skip("nodeprep.trainer is not in this checkout; it comes with the checkpoint work")
    endpoint = Endpoint().start()
    try:
        run_dir, registry = tmp_path / "run", tmp_path / "registry"
        env = dict(os.environ, NODEPREP_RUN_DIR=str(registry))
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "nodeprep.trainer",
                    "--run-dir",
                    str(run_dir),
                    "--steps",
                    "100000000",
                    "--checkpoint-every",
                    "100000000",
                    "--threads",
                    "1",
                    "--model-mb",
                    "1",
                    "--log-every",
                    "100000",
                ],
                env=env,
            )
        )
        _wait(lambda: contract.registered_trainers(registry / "trainers"), 120, "registration")
        cfg = tmp_path / "hb.json"
        cfg.write_text(
            json.dumps(
                {
                    "registry_dir": str(registry / "trainers"),
                    "probes": [
                        {
                            "name": "web",
                            "type": "http",
                            "url": f"{endpoint.url}/",
                            "interval": 1,
                            "timeout": 0.5,
                            "fail_threshold": 3,
                        }
                    ],
                }
            )
        )
        processes.append(
            subprocess.Popen([sys.executable, "-m", "nodeprep.heartbeat", "--config", str(cfg)])
        )
        time.sleep(2)
        endpoint.set_mode("refuse")
        records = _wait(lambda: contract.read_emergency_records(run_dir), 60, "the record")
    finally:
        endpoint.stop()
    record = records[0]  # type: ignore[index]
    verify = importlib.import_module("nodeprep.checkpoint.manifest").verify
    manifest = verify(Path(record.path))
    assert manifest.step == record.step
    assert record.signal == "SIGUSR1"
    assert record.committed_time >= record.signal_time
