"""The heartbeat's hang lane: SIGSTOP to declared hang, and false trips of slow-but-steady runs.

Each run starts a real daemon (``python -m nodeprep.heartbeat``) with a progress probe and a
trainer that publishes its progress, lets it step, SIGSTOPs it and reads when the daemon
declared the hang from the daemon's webhook (``detected_at``). Runs go several at a time.

- detection lane: the contract's stand-in trainer (tests/unit/heartbeat/dummy_trainer.py)
  stepping every 0.2 s. A hang is declared at most one read interval after the allowance runs
  out, counted from the last step (which came up to one step before the stop), so to declare
  within 10 x the median step the lane allows 8 x the median (1.6 s) and reads every 0.25 s.
  Target: declared within 10 x the median step, 2 s.
- reference lane: the reference trainer (``python -m nodeprep.trainer``) with the probe's
  defaults (floor 30 s: its steps take milliseconds). Target: declared within 60 s.
- soak lane: stand-in trainers whose steps become 5 x slower after 20 steps, never stopped;
  every hang declared is a false trip. Target: 0.

Usage: python benchmarks/heartbeat.py --hang [--quick]  (or this file directly)
Prints figures, then one JSON line with hang_detect_p50_s, hang_detect_max_s and
hang_false_trips.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from heartbeat import Hooks  # noqa: E402
from nodeprep.progress import progress_path, read_progress  # noqa: E402

# Trainer commands; {run_dir} is each run's own.
DUMMY = [sys.executable, str(REPO / "tests" / "unit" / "heartbeat" / "dummy_trainer.py"),
         "{run_dir}", "--progress"]  # fmt: skip
REFERENCE = [sys.executable, "-m", "nodeprep.trainer", "--run-dir", "{run_dir}",
             "--steps", "100000000", "--checkpoint-every", "500", "--threads", "1",
             "--log-every", "100000"]  # fmt: skip
DETECT_PROBE = {"interval": 0.25, "timeout": 0.25, "factor": 8, "floor_s": 1.0, "startup_s": 60}
DUMMY_STEP_S = 0.2


class Run:
    """One daemon and one trainer in a directory of their own."""

    def __init__(self, index: int, work: Path, hook_url: str, probe: dict[str, Any],
                 trainer: list[str]) -> None:  # fmt: skip
        self.dir = work / f"run-{index}"
        self.registry = self.dir / "registry" / "trainers"
        self.registry.mkdir(parents=True)
        config = {
            "registry_dir": str(self.registry),
            "probes": [{"name": f"lane-{index}", "type": "progress", **probe}],
            "actions": {"signal_trainers": False, "webhook": {"url": hook_url},
                        "hang": {"dump_wait_s": 1, "grace_s": 5}},
        }  # fmt: skip
        (self.dir / "hb.json").write_text(json.dumps(config))
        env = dict(os.environ, NODEPREP_RUN_DIR=str(self.registry.parent), OMP_NUM_THREADS="1")
        argv = [arg.format(run_dir=self.dir / "train") for arg in trainer]
        self.trainer = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.daemon = subprocess.Popen(
            [sys.executable, "-m", "nodeprep.heartbeat", "--config", str(self.dir / "hb.json"),
             "--log-level", "WARNING"], stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def steps(self) -> int:
        reading = read_progress(progress_path(self.trainer.pid, self.registry))
        return reading.step if reading is not None else 0

    def stop(self) -> None:
        for proc in (self.daemon, self.trainer):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.wait()


def _wait_steps(run: Run, steps: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while run.steps() < steps:
        if time.monotonic() > deadline or run.trainer.poll() is not None:
            raise RuntimeError(f"trainer in {run.dir} never reached step {steps}")
        time.sleep(0.05)


def _hang_event(q: queue.Queue[dict[str, Any]], timeout: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            event = q.get(timeout=left)
        except queue.Empty:
            return None
        if event["event"] == "hang":
            return event
    return None


def stop_and_time(run: Run, q: queue.Queue[dict[str, Any]], warmup_steps: int,
                  timeout: float, out: dict[str, list[float]]) -> None:  # fmt: skip
    """Let the trainer step, SIGSTOP it, record the seconds until the hang is declared."""
    try:
        _wait_steps(run, warmup_steps, 240)
        early = not q.empty()  # a hang declared before the stop is a false trip
        stopped = time.time()
        os.kill(run.trainer.pid, signal.SIGSTOP)
        event = _hang_event(q, timeout)
        out["false"].extend([1.0] if early else [])
        if event is None:
            out["missed"].append(1.0)
        else:
            out["detect"].append(event["detected_at"] - stopped)
    finally:
        run.stop()


def lane(count: int, parallel: int, probe: dict[str, Any], trainer: list[str],
         warmup: int, timeout: float, work: Path) -> dict[str, list[float]]:  # fmt: skip
    """``count`` stop-and-time runs, ``parallel`` at a time."""
    out: dict[str, list[float]] = {"detect": [], "missed": [], "false": []}
    hooks = Hooks(count)
    try:
        for first in range(0, count, parallel):
            batch = range(first, min(first + parallel, count))
            runs = {i: Run(i, work, hooks.url, probe, trainer) for i in batch}
            workers = [threading.Thread(target=stop_and_time,
                                        args=(runs[i], hooks.queues[i], warmup, timeout, out))
                       for i in batch]  # fmt: skip
            for w in workers:
                w.start()
            for w in workers:
                w.join()
    finally:
        hooks.server.shutdown()
    return out


def soak(count: int, seconds: float, work: Path) -> int:
    """Slow-but-steady trainers under watch for ``seconds``: the hangs declared (false)."""
    hooks = Hooks(count)
    slow = [*DUMMY, "--step-s", str(DUMMY_STEP_S), "--slow-after", "20",
            "--slow-step-s", str(5 * DUMMY_STEP_S)]  # fmt: skip
    runs = [Run(i, work, hooks.url, DETECT_PROBE, slow) for i in range(count)]
    try:
        time.sleep(seconds)
        trips = sum(1 for q in hooks.queues for event in list(q.queue) if event["event"] == "hang")
        lost = [run.dir for run in runs if run.trainer.poll() is not None]
        if lost:
            raise RuntimeError(f"soak trainers exited early: {lost}")
    finally:
        for run in runs:
            run.stop()
        hooks.server.shutdown()
    return trips


def main(quick: bool = False, seed: int = 0) -> int:
    del seed  # the runs are timed, not drawn
    count, soak_n, soak_s, refs = (20, 4, 30.0, 1) if quick else (40, 8, 180.0, 2)
    dummy = [*DUMMY, "--step-s", str(DUMMY_STEP_S)]
    with tempfile.TemporaryDirectory(prefix="hb-hang-") as tmp:
        work = Path(tmp)
        fast = lane(count, 4, DETECT_PROBE, dummy, 10, 30, work / "detect")
        ref = lane(refs, 1, {"interval": 5, "timeout": 2}, REFERENCE, 50, 120, work / "ref")
        false_trips = soak(soak_n, soak_s, work / "soak")
    false_trips += len(fast["false"]) + len(ref["false"])
    detect = fast["detect"]
    allowance = DETECT_PROBE["factor"] * DUMMY_STEP_S
    target = 10 * DUMMY_STEP_S
    worst = max(detect)
    print(
        f"stand-in trainer, step {DUMMY_STEP_S} s, allowance {allowance:g} s (8 x median), "
        f"read every {DETECT_PROBE['interval']} s: {len(detect)} hangs declared of {count}, "
        f"SIGSTOP -> declared median {statistics.median(detect):.2f} s, max {worst:.2f} s "
        f"({worst / DUMMY_STEP_S:.1f} x the median step); missed {len(fast['missed'])}"
    )
    print(
        f"reference trainer, probe defaults (floor 30 s, read every 5 s): "
        f"{', '.join(f'{d:.1f} s' for d in ref['detect'])}; missed {len(ref['missed'])}"
    )
    print(
        f"slow-but-steady soak: {soak_n} trainers slowing 5 x after 20 steps, {soak_s:.0f} s: "
        f"{false_trips} false trips (all lanes)"
    )
    print(json.dumps({
        "hang_detect_p50_s": round(statistics.median(detect), 3),
        "hang_detect_max_s": round(max(detect), 3),
        "hang_false_trips": false_trips,
        "hang_missed": len(fast["missed"]) + len(ref["missed"]),
        "hang_allowance_s": allowance,
        "hang_within_10x_median_step": worst <= target,
        "reference_detect_max_s": round(max(ref["detect"], default=float("nan")), 1),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 runs, a 30 s soak")
    sys.exit(main(parser.parse_args().quick))
