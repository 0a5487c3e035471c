"""Drill benchmark: each fault N times against one running job on a lab node, and what it cost.

Runs ``nodeprep drill`` on a provisioned lab (the inventory `make demo` leaves in
.lab-inventory.ini, or any lab inventory) against a job it starts itself (the reference
trainer in the image, a checkpoint every 20 steps, steps paced at 0.2 s), N rounds of every
fault, and prints per fault the median and max of: detection time, checkpoint latency (where
one is due), steps lost and time from the fault to the next training step. A fault this
release cannot inject is named with the reason instead of figures. Before each round an SSH
login of the node's user is opened (an operator's shell) for ssh-drop to end.

Usage: python benchmarks/drills.py [--inventory .lab-inventory.ini] [--quick] [--rounds N]
       [--faults kill,netem,link,ssh-drop] [--duration S]
The last line is JSON: {"faults": {"<fault>": {"runs": N, "detect_s_max": .., ...}}}.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "provision"))
from nodeprep import drill  # noqa: E402

NODEPREP = str(Path(sys.executable).with_name("nodeprep"))
JOB = {"job_trainer_steps": 1000000, "job_trainer_checkpoint_every": 20,
       "job_trainer_model_mb": 0.25, "job_min_free_mb": 256, "ansible_timeout": 120,
       "job_trainer_extra_args": ["--min-step-s", "0.2"]}  # fmt: skip
FIGURES = ("detect_s", "checkpoint_s", "steps_lost", "next_step_s")


def _operator_session(inventory: str) -> subprocess.Popen[bytes]:
    """An SSH login of the lab node's user, as an operator's shell: what ssh-drop must end."""
    line = next(x for x in Path(inventory).read_text().splitlines() if "ansible_port=" in x)
    fields = dict(re.findall(r"(\w+)=(\S+)", line))
    argv = ["ssh", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-i", fields["ansible_ssh_private_key_file"], "-p",
            fields["ansible_port"], f"{fields['ansible_user']}@{fields['ansible_host']}",
            "sleep", "900"]  # fmt: skip
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip


def _nodeprep(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([NODEPREP, *argv], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise SystemExit(f"nodeprep {argv[0]} failed ({done.returncode}):\n"
                         f"{done.stdout[-3000:]}{done.stderr[-2000:]}")  # fmt: skip
    return done


def _wait_stepping(inventory: str, name: str, variables: Path, limit_s: float = 900) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        done = _nodeprep("status", inventory, "--name", name, "-e", f"@{variables}",
                         "--fast", check=False)  # fmt: skip
        for line in done.stdout.splitlines():
            fields = line.split()
            if len(fields) > 3 and fields[1] == "running" and fields[3].isdigit():
                return
            if len(fields) > 1 and fields[1] in ("failed", "stopped", "absent"):
                raise SystemExit(f"job {name} is {fields[1]}:\n{done.stdout[-3000:]}")
        time.sleep(5)
    raise SystemExit(f"job {name} made no step within {limit_s:.0f} s")


def _summary(values: list[float | None]) -> tuple[float | None, float | None]:
    seen = [v for v in values if v is not None]
    if not seen:
        return None, None
    return round(statistics.median(seen), 3), round(max(seen), 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", default=str(REPO / ".lab-inventory.ini"))
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--rounds", type=int, help="rounds of every fault (default 5, quick 3)")
    parser.add_argument("--faults", default="kill,netem,link,ssh-drop")
    parser.add_argument("--duration", type=int, default=8, help="seconds a lasting fault lasts")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 5)
    asked = [f.strip() for f in args.faults.split(",") if f.strip()]
    runnable = [f for f in asked if f in drill.FAULTS]
    name = f"bench-{time.strftime('%H%M%S')}"
    results: dict[str, list[dict[str, Any]]] = {f: [] for f in runnable}
    with tempfile.TemporaryDirectory(prefix="drill-bench-") as tmp:
        variables = Path(tmp) / "job.json"
        variables.write_text(json.dumps(JOB))
        began = time.monotonic()
        _nodeprep("run", args.inventory, "--name", name, "--fast", "-e", f"@{variables}")
        try:
            _wait_stepping(args.inventory, name, variables)
            print(f"job {name} stepping after {time.monotonic() - began:.0f} s", flush=True)
            for index in range(rounds):
                operator = _operator_session(args.inventory) if "ssh-drop" in runnable else None
                time.sleep(8 if operator else 0)  # the login, under emulation
                report = Path(tmp) / f"round-{index}.json"
                done = _nodeprep("drill", args.inventory, "--name", name, "--faults",
                                 ",".join(runnable), "--duration", str(args.duration), "--fast",
                                 "-e", f"@{variables}", "--json", str(report),
                                 check=False)  # fmt: skip
                if not report.exists():
                    raise SystemExit(f"round {index + 1}: no report ({done.returncode}):\n"
                                     f"{done.stdout[-3000:]}{done.stderr[-2000:]}")  # fmt: skip
                if operator is not None and operator.poll() is None:
                    operator.kill()  # ssh-drop did not end it (its drill says so)
                if operator is not None:
                    operator.wait()
                for found in json.loads(report.read_text())["drills"]:
                    results[found["fault"]].append(found)
                print(f"round {index + 1}/{rounds}: exit {done.returncode}", flush=True)
        finally:
            _nodeprep("stop", args.inventory, "--name", name, "--fast", "-e", f"@{variables}",
                      "--timeout", "240", check=False)  # fmt: skip
    print(json.dumps({"faults": _summarise(asked, results)}))
    return 0


def _summarise(asked: list[str], results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per fault: runs, passes, and the max of each figure; prints median and max."""
    summary: dict[str, Any] = {}
    for fault in asked:
        if fault not in drill.FAULTS:
            print(f"{fault:9s} not run: unknown fault")
            summary[fault] = {"runs": 0, "not_applicable": "unknown fault"}
            continue
        runs = results[fault]
        line = {"runs": len(runs), "passed": sum(1 for r in runs if r.get("passed"))}
        text = []
        for key in FIGURES:
            median, top = _summary([r.get(key) for r in runs])
            line[f"{key}_max"] = top
            text.append(f"{key} median {median} max {top}")
        detected = sorted({str(r.get("detected_by") or "-") for r in runs})
        print(f"{fault:9s} {line['passed']}/{line['runs']} passed; detected by "
              f"{','.join(detected)}; {'; '.join(text)}")  # fmt: skip
        summary[fault] = line
    return summary


if __name__ == "__main__":
    sys.exit(main())
