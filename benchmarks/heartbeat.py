"""Heartbeat benchmark: fault detection latency, detection -> checkpoint, false trips, cost.

Runs several real daemons (``python -m nodeprep.heartbeat``), each watching its own local
HTTP endpoint (1 s interval, 0.5 s timeout, threshold 3, a failed probe retried after the
default retry_interval) with its own registered trainer,
injects faults (refuse / hang / HTTP 503) at random phases, and reads the trips from a
local webhook and the committed checkpoints from each trainer's emergency.jsonl. Then all
endpoints turn slow-but-ok (0.35 s answers) for a soak that must not trip.

Usage: python benchmarks/heartbeat.py [--quick] [--compare] [--trainer-cmd "CMD ... {run_dir}"]
``--compare`` makes every odd lane a baseline that retries only after a whole interval.
The trainer defaults to the dummy contract trainer in tests/unit/heartbeat; pass
``--trainer-cmd "python -m nodeprep.trainer ... {run_dir}"`` to use the reference trainer.
Prints figures, then one JSON line.

``--hang`` runs the hang lane instead (benchmarks/heartbeat_hang.py): time from a SIGSTOP
to the progress probe declaring the hang, and the false trips of slow-but-steady trainers.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "unit" / "heartbeat"))
from hb_endpoints import Endpoint  # noqa: E402

from nodeprep import contract  # noqa: E402

DUMMY = f"{sys.executable} {REPO / 'tests' / 'unit' / 'heartbeat' / 'dummy_trainer.py'} {{run_dir}}"
FAULTS = ("refuse", "hang", "error")


class Hooks:
    """A local webhook receiver: one queue of trip/recover events per lane."""

    def __init__(self, lanes: int) -> None:
        self.queues: list[queue.Queue[dict[str, Any]]] = [queue.Queue() for _ in range(lanes)]
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return

            def do_POST(self) -> None:
                event = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hooks.queues[int(event["probe"].split("-")[1])].put(event)
                self.send_response(204)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"


def _lane_config(
    index: int, url: str, hook_url: str, registry: Path, quick_retry: bool
) -> dict[str, Any]:
    probe: dict[str, Any] = {
        "name": f"lane-{index}",
        "type": "http",
        "url": url,
        "interval": 1,
        "timeout": 0.5,
        "fail_threshold": 3,
        "recover_threshold": 2,
    }
    if not quick_retry:
        probe["retry_interval"] = probe["interval"]  # the baseline: a retry waits an interval
    actions = {
        "min_trip_interval_s": 0,
        "pause_wait_s": 30,
        "webhook": {"url": hook_url, "timeout_s": 2},
    }
    return {"registry_dir": str(registry), "actions": actions, "probes": [probe]}


class Lane:
    """One daemon, its endpoint and its trainer."""

    def __init__(
        self, index: int, work: Path, hook_url: str, trainer_cmd: str, quick_retry: bool
    ) -> None:
        self.index = index
        self.quick_retry = quick_retry
        self.endpoint = Endpoint(slow_s=0.35).start()
        self.run_dir = work / f"run-{index}"
        registry_root = work / f"registry-{index}"
        config = work / f"hb-{index}.json"
        raw = _lane_config(
            index, f"{self.endpoint.url}/", hook_url, registry_root / "trainers", quick_retry
        )
        config.write_text(json.dumps(raw))
        env = dict(os.environ, NODEPREP_RUN_DIR=str(registry_root))
        argv = shlex.split(trainer_cmd.format(run_dir=self.run_dir))
        self.trainer = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
        self.daemon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nodeprep.heartbeat",
                "--config",
                str(config),
                "--log-level",
                "WARNING",
            ],
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while not contract.registered_trainers(registry_root / "trainers"):
            if time.monotonic() > deadline or self.trainer.poll() is not None:
                raise RuntimeError(f"trainer of lane {index} did not register: {argv}")
            time.sleep(0.1)

    def stop(self) -> None:
        for proc in (self.daemon, self.trainer):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.endpoint.stop()


def _next(
    q: queue.Queue[dict[str, Any]], event: str, timeout: float, unexpected: list[float]
) -> dict[str, Any] | None:
    """The next ``event``; a trip seen while waiting for something else is a false trip."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            item = q.get(timeout=left)
        except queue.Empty:
            return None
        if item["event"] == event:
            return item
        if item["event"] == "trip":
            unexpected.append(1)
    return None


def _drain_trips(queues: list[queue.Queue[dict[str, Any]]]) -> int:
    trips = 0
    for q in queues:
        while not q.empty():
            trips += q.get_nowait()["event"] == "trip"
    return trips


def run_lane(
    lane: Lane,
    q: queue.Queue[dict[str, Any]],
    faults: int,
    out: dict[str, list[float]],
    rng: random.Random,
) -> None:
    """Inject ``faults`` faults one after another; record latencies and misses."""
    time.sleep(3)  # two successes: the lane starts healthy
    for _ in range(faults):
        time.sleep(rng.uniform(0, 1.0))
        before = len(contract.read_emergency_records(lane.run_dir))
        injected = time.time()
        lane.endpoint.set_mode(rng.choice(FAULTS))
        trip = _next(q, "trip", 15, out["unexpected"])
        if trip is None:
            out["missed"].append(1)
        else:
            key = "detect" if lane.quick_retry else "baseline_detect"
            out[key].append(trip["detected_at"] - injected)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                records = contract.read_emergency_records(lane.run_dir)
                if len(records) > before:
                    out["checkpoint"].append(records[-1].committed_time - trip["detected_at"])
                    break
                time.sleep(0.02)
            else:
                out["no_checkpoint"].append(1)
        lane.endpoint.set_mode("ok")
        if _next(q, "recover", 15, out["unexpected"]) is None:
            out["no_recover"].append(1)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(
    lanes_n: int, faults: int, soak_s: float, trainer_cmd: str, seed: int, compare: bool
) -> dict[str, Any]:
    """Fault phase on all lanes in parallel, then the slow-but-ok soak; raw figures.

    With ``compare``, every odd lane is a baseline lane whose failed probe waits a whole
    interval for its retry (the daemon before quick retries), side by side with the rest.
    """
    rng = random.Random(seed)
    keys = ("detect", "baseline_detect", "checkpoint", "missed", "no_checkpoint", "no_recover")
    keys += ("unexpected",)
    out: dict[str, list[float]] = {k: [] for k in keys}
    hooks = Hooks(lanes_n)
    with tempfile.TemporaryDirectory(prefix="hb-bench-") as tmp:
        lanes = [
            Lane(i, Path(tmp), hooks.url, trainer_cmd, not (compare and i % 2))
            for i in range(lanes_n)
        ]
        try:
            started, cpu0 = time.monotonic(), _cpu_seconds(lanes[0].daemon.pid)
            workers = [
                threading.Thread(
                    target=run_lane,
                    args=(
                        lane,
                        hooks.queues[lane.index],
                        -(-faults // lanes_n),
                        out,
                        random.Random(rng.random()),
                    ),
                )
                for lane in lanes
            ]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            false_trips = len(out["unexpected"]) + _drain_trips(hooks.queues)
            for lane in lanes:
                lane.endpoint.set_mode("slow")
            time.sleep(soak_s)
            false_trips += _drain_trips(hooks.queues)
            wall = time.monotonic() - started
            cpu_pct = 100 * (_cpu_seconds(lanes[0].daemon.pid) - cpu0) / wall
            rss_mb = max(_rss_peak_mb(lane.daemon.pid) for lane in lanes)
        finally:
            for lane in lanes:
                lane.stop()
            hooks.server.shutdown()
    return {**out, "false_trips": false_trips, "wall": wall, "cpu_pct": cpu_pct, "rss_mb": rss_mb}


def report(res: dict[str, Any], lanes_n: int, soak_s: float, trainer: str) -> None:
    """Figures for people, then the one-line JSON summary."""
    detect, ckpt = res["detect"], res["checkpoint"]
    print(
        f"lanes: {lanes_n} daemons in parallel; faults injected: "
        f"{len(detect) + len(res['baseline_detect']) + len(res['missed'])} "
        f"({', '.join(FAULTS)}); "
        "interval 1 s, timeout 0.5 s, threshold 3, a failed probe retried after the default "
        "retry_interval (timeout / 3)"
    )
    print(
        f"detection: p50 {_pct(detect, 0.5):.3f} s, p99 {_pct(detect, 0.99):.3f} s, "
        f"max {max(detect, default=float('nan')):.3f} s; missed {len(res['missed'])}"
    )
    base = res["baseline_detect"]
    if base:
        print(
            f"baseline lanes (a failed probe retried after a whole interval): detection p50 "
            f"{_pct(base, 0.5):.3f} s, p99 {_pct(base, 0.99):.3f} s, max {max(base):.3f} s; "
            f"p99 ratio quick/baseline {_pct(detect, 0.99) / _pct(base, 0.99):.2f}"
        )
    print(
        f"detection -> committed checkpoint ({trainer}): p50 {_pct(ckpt, 0.5):.3f} s, "
        f"p99 {_pct(ckpt, 0.99):.3f} s; missing {len(res['no_checkpoint'])}"
    )
    print(
        f"slow-but-ok soak {soak_s:.0f} s x {lanes_n} daemons, plus the fault phase: "
        f"{res['false_trips']} false trips; recoveries missed {len(res['no_recover'])}"
    )
    print(
        f"daemon cost (lane 0 over {res['wall']:.0f} s): CPU {res['cpu_pct']:.2f} %, "
        f"peak RSS {res['rss_mb']:.1f} MB"
    )
    print(
        json.dumps(
            {
                "detect_p50_s": round(_pct(detect, 0.5), 3),
                "detect_p99_s": round(_pct(detect, 0.99), 3),
                **(
                    {
                        "baseline_detect_p50_s": round(_pct(base, 0.5), 3),
                        "baseline_detect_p99_s": round(_pct(base, 0.99), 3),
                    }
                    if base
                    else {}
                ),
                "detect_to_checkpoint_p99_s": round(_pct(ckpt, 0.99), 3),
                "false_trips": res["false_trips"],
                "cpu_pct": round(res["cpu_pct"], 2),
                "rss_mb": round(res["rss_mb"], 1),
                "trainer": "dummy" if trainer.startswith("dummy") else trainer,
            }
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 faults, short soak")
    parser.add_argument("--trainer-cmd", default=DUMMY, help="command template with {run_dir}")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--lanes", type=int, help="daemons in parallel (default 8, quick 4)")
    parser.add_argument("--hang", action="store_true", help="the hang lane instead")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="odd lanes retry a failed probe only after a whole interval (the old daemon)",
    )
    args = parser.parse_args()
    if args.hang:
        from heartbeat_hang import main as hang_main

        return hang_main(quick=args.quick, seed=args.seed)
    lanes_n, faults, soak_s = (4, 20, 20.0) if args.quick else (8, 200, 60.0)
    lanes_n = args.lanes or lanes_n
    res = measure(lanes_n, faults, soak_s, args.trainer_cmd, args.seed, args.compare)
    dummy = args.trainer_cmd == DUMMY
    report(res, lanes_n, soak_s, "dummy (tests/unit/heartbeat)" if dummy else args.trainer_cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
