"""``python -m nodeprep.smoke``: run the kill-and-resume drill and print its result as JSON.

Exit codes: 0 the drill passed, 1 it failed (the JSON says why), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import asdict
from pathlib import Path

from nodeprep.smoke.drill import DrillConfig, run_drill
from nodeprep.smoke.heartbeat_drill import run_heartbeat_drill


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nodeprep.smoke",
        description="Train, SIGKILL at a random step, resume, and compare the final state hash "
        "with an uninterrupted run: bit-exact or fail.",
        epilog="example: python -m nodeprep.smoke --work-dir /var/tmp/smoke --steps 24 "
        "--launcher 'apptainer exec --no-privs /opt/nodeprep/trainer.sif'",
    )
    add = parser.add_argument
    add("--work-dir", type=Path, required=True, help="both runs' directories go here")
    add("--steps", type=int, default=24)
    add("--checkpoint-every", type=int, default=4)
    add("--seed", type=int, default=0)
    add("--kill-step", type=int, help="kill after this step (default: a random one)")
    add("--model-mb", type=float, default=0.25)
    add("--launcher", default="", help="command prefix that runs python inside an image")
    add("--python", help="python to run the trainer with (default: this one, or python3 inside)")
    add("--deadline-s", type=float, default=300.0, help="give up and kill everything after this")
    add("--data", type=Path, help="train on this staged data set (the trainer's --data)")
    add("--workers", type=int, default=0, help="loader worker processes over --data")
    add(
        "--heartbeat",
        action="store_true",
        help="instead: stop a private heartbeat's probe target under a running trainer and "
        "require an emergency checkpoint",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.checkpoint_every < 1 or args.steps < args.checkpoint_every + 2:
        parser.error("--steps must exceed --checkpoint-every by at least 2, both at least 1")
    if args.kill_step is not None and not 1 <= args.kill_step < args.steps:
        parser.error("--kill-step must be between 1 and --steps - 1")
    if args.workers < 0 or (args.workers and args.data is None):
        parser.error("--workers must be 0 or more, and needs --data")
    launcher = tuple(shlex.split(args.launcher))
    python = args.python or ("python3" if launcher else sys.executable)
    if args.heartbeat:
        found = run_heartbeat_drill(args.work_dir, python, args.deadline_s)
        print(json.dumps(asdict(found), sort_keys=True))
        return 0 if found.passed else 1
    config = DrillConfig(
        work_dir=args.work_dir,
        steps=args.steps,
        checkpoint_every=args.checkpoint_every,
        seed=args.seed,
        kill_step=args.kill_step,
        model_mb=args.model_mb,
        launcher=launcher,
        python=python,
        deadline_s=args.deadline_s,
        data=args.data,
        workers=args.workers,
    )
    result = run_drill(config)
    print(json.dumps(asdict(result), sort_keys=True))
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
