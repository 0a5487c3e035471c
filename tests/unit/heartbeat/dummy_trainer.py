"""A stand-in trainer that follows the contract: register, save on SIGUSR1, record it.

It is not the reference trainer (that lives in nodeprep.trainer); it only proves the
signal path. It "trains" in steps of ``--step-s`` seconds; the SIGUSR1 handler only sets
a flag, and at the next step boundary it writes a checkpoint file (temp file, fsync,
rename) and appends an EmergencyRecord. It writes ``<run_dir>/ready`` once registered.
With ``--progress`` it publishes its progress at every step and dumps its stacks on
STACKS_SIGNAL, as the reference trainer does; ``--hang-after N`` then blocks it after step
N in a call that never returns (as a rank stuck in a collective), and ``--slow-after N``
makes its steps ``--slow-step-s`` long from step N on.

Usage: python dummy_trainer.py RUN_DIR [--step-s 0.05] [--progress] [--hang-after N]
    [--slow-after N --slow-step-s S]   (registry from NODEPREP_RUN_DIR)
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from nodeprep import contract
from nodeprep.progress import ProgressWriter, progress_path


def _save(run_dir: Path, step: int) -> Path:
    target = run_dir / f"ckpt-{step:06d}"
    tmp = run_dir / f".tmp-{step:06d}"
    with open(tmp, "wb") as handle:
        handle.write(step.to_bytes(8, "little") * 1024)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, target)
    dir_fd = os.open(run_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return target


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--hang-after", type=int, default=0)
    parser.add_argument("--slow-after", type=int, default=0)
    parser.add_argument("--slow-step-s", type=float, default=0.0)
    args = parser.parse_args()
    run_dir: Path = args.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    requested: list[float] = []
    running = [True]

    def on_usr1(_sig: int, _frame: FrameType | None) -> None:
        requested.append(time.time())

    def on_term(_sig: int, _frame: FrameType | None) -> None:
        running[0] = False

    signal.signal(contract.EMERGENCY_SIGNAL, on_usr1)
    signal.signal(signal.SIGTERM, on_term)
    if args.progress:
        dump = contract.stack_dump_path(run_dir, 0, os.getpid())
        dump.parent.mkdir(parents=True, exist_ok=True)
        stacks = open(dump, "a", encoding="utf-8")  # noqa: SIM115 - open for the handler
        faulthandler.register(contract.STACKS_SIGNAL, file=stacks, all_threads=True)
    contract.register(run_dir, time.time())
    progress = ProgressWriter(progress_path(os.getpid()), 0) if args.progress else None
    (run_dir / "ready").write_text(str(os.getpid()))
    step = 0
    try:
        while running[0]:
            slow = args.slow_after and step >= args.slow_after
            time.sleep(args.slow_step_s if slow else args.step_s)
            step += 1
            if progress is not None:
                progress.step(step, 1.0 / step)
            if step == args.hang_after:
                threading.Event().wait()  # never returns, signal handlers or not
            if requested:
                signal_time = requested.pop(0)
                requested.clear()
                path = _save(run_dir, step)
                record = contract.EmergencyRecord(
                    "SIGUSR1", signal_time, time.time(), str(path), step
                )
                contract.append_emergency_record(run_dir, record)
    finally:
        if progress is not None:
            progress.close()
        contract.unregister()
    return 0


if __name__ == "__main__":
    sys.exit(main())
