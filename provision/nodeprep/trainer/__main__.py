"""``python -m nodeprep.trainer``: the reference trainer that ``nodeprep verify`` kills and resumes.

Exit codes: 0 the run finished its steps and its final state is durable (a
committed full checkpoint of the last step, or nothing left to train); 143 it
saved and stopped on SIGTERM; 2 bad arguments; 1 anything else, including a
failed final save or a save failure with ``--stop-on-save-error`` (one sentence
on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import sys
import time
from pathlib import Path
from typing import TextIO

import torch

from nodeprep import contract
from nodeprep.checkpoint import CheckpointWriteError, DatasetChangedError
from nodeprep.checkpoint import distributed as dist_util
from nodeprep.progress import ProgressWriter, progress_path
from nodeprep.trainer.loop import (
    EXIT_PREEMPTED,
    TrainConfig,
    Trainer,
    TrainingStopped,
    setup_distributed,
)
from nodeprep.trainer.shards import DataDirError
from nodeprep.trainer.statehash import final_state


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nodeprep.trainer",
        description="Train a small model on seeded synthetic data with verified checkpoints; "
        "resumes automatically from the newest valid checkpoint in RUN_DIR.",
        epilog="example: python -m nodeprep.trainer --run-dir /tmp/run --steps 200 --seed 1 "
        "--checkpoint-every 10 --full-every 50 --state-hash-out /tmp/run/hash.txt",
    )
    add = parser.add_argument
    add("--run-dir", type=Path, required=True, help="checkpoints and emergency.jsonl go here")
    add("--steps", type=int, required=True, help="total optimizer steps of the run")
    add("--seed", type=int, default=0)
    add("--checkpoint-every", type=int, default=50, help="a checkpoint every K steps")
    add(
        "--full-every",
        type=int,
        default=0,
        help="a full checkpoint every M steps, light ones in between (default: every K, all full)",
    )
    add("--keep", type=int, default=3, help="full checkpoints to keep (light: 2)")
    add(
        "--checkpoint-copies",
        choices=["shared", "node"],
        default="shared",
        help="shared: rank 0 writes the one copy, on a filesystem every node reads; node: each "
        "node's local rank 0 keeps its own copy in RUN_DIR (no shared filesystem), and a "
        "resume loads the newest checkpoint that verifies on every node",
    )
    add("--model-mb", type=float, default=1.0, help="approximate float32 model size in MiB")
    add("--batch-size", type=int, default=32)
    add("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    add("--sync-save", action="store_true", help="write checkpoints in the training process")
    add("--stop-on-save-error", action="store_true", help="stop instead of training on")
    add(
        "--nonfinite",
        choices=["refuse", "quarantine"],
        default="refuse",
        help="a state with NaN/Inf weights or loss is never a checkpoint: refuse it, or write "
        "it aside under RUN_DIR/checkpoints/quarantine for a post-mortem",
    )
    add("--stop-on-nonfinite-loss", action="store_true", help="stop at the first NaN/Inf loss")
    add("--drill-nan-at", type=int, default=0, help="fault drill: weights turn NaN at STEP")
    add(
        "--workers",
        type=int,
        help="load batches through a DataLoader with N worker processes (0: in this process) "
        "that resumes bit-exact; by default batches are cut in memory",
    )
    add(
        "--data",
        type=Path,
        help="train on a staged data set (DIR/shards/*.bin and its dataset-manifest.json, as "
        "python -m nodeprep.trainer.shards writes one); its version is kept in every checkpoint "
        "and a resume against another version is refused",
    )
    add("--allow-dataset-change", action="store_true", help="resume on a changed data set")
    add(
        "--cache",
        type=Path,
        help="keep --data's preprocessed shards here and reuse them (entries are checked, "
        "never unpickled; a torn or foreign one is computed again)",
    )
    add(
        "--min-step-s",
        type=float,
        default=0.0,
        help="fault drills: each step lasts at least S seconds, so that a short job lives long "
        "enough to be disturbed (the training state is the same as without it)",
    )
    add(
        "--until-step",
        type=int,
        default=0,
        help="end after step N as after the last one (final checkpoint, state hash); the "
        "learning-rate schedule still spans --steps. Drills replay an interrupted run up to "
        "the step it reached this way (0: train to --steps)",
    )
    add("--log-every", type=int, default=1)
    add("--state-hash-out", type=Path, help="write the final state's sha256 here")
    add("--final-state-out", type=Path, help="torch.save the final state here (for tests)")
    return parser


def _config(args: argparse.Namespace, device: str) -> TrainConfig:
    for name in ("steps", "checkpoint_every", "keep", "batch_size", "log_every"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be at least 1")
    if args.workers is not None and args.workers < 0:
        raise SystemExit("--workers must be 0 (load in the trainer) or more")
    if args.cache is not None and args.data is None:
        raise SystemExit("--cache keeps --data's preprocessed shards: give --data DIR too")
    if args.drill_nan_at < 0:
        raise SystemExit("--drill-nan-at must be a step (1 or more), or 0 for no drill")
    if args.until_step < 0:
        raise SystemExit("--until-step must be a step (1 or more), or 0 for --steps")
    if not 0 <= args.min_step_s <= 3600:
        raise SystemExit("--min-step-s must be between 0 and 3600 seconds")
    if args.full_every < 0 or args.model_mb <= 0:
        raise SystemExit("--full-every must be >= 0 and --model-mb > 0")
    return TrainConfig(
        run_dir=args.run_dir,
        steps=args.steps,
        seed=args.seed,
        checkpoint_every=args.checkpoint_every,
        full_every=args.full_every or args.checkpoint_every,
        keep=args.keep,
        model_mb=args.model_mb,
        batch_size=args.batch_size,
        device=device,
        async_write=not args.sync_save,
        stop_on_save_error=args.stop_on_save_error,
        log_every=args.log_every,
        nonfinite=args.nonfinite,
        stop_on_nonfinite_loss=args.stop_on_nonfinite_loss,
        drill_nan_at=args.drill_nan_at,
        workers=args.workers,
        data=args.data,
        cache=args.cache,
        allow_dataset_change=args.allow_dataset_change,
        min_step_s=args.min_step_s,
        checkpoint_copies=args.checkpoint_copies,
        until_step=args.until_step,
    )


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        config = _config(args, args.device)
    except SystemExit as exc:
        parser.error(str(exc))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.threads:
        torch.set_num_threads(args.threads)
    # cuBLAS is deterministic only with a fixed workspace; it must be set before CUDA starts.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    trainer = _trainer(args)
    if isinstance(trainer, str):
        print(f"nodeprep.trainer: {trainer}", file=sys.stderr)
        return 2
    config = trainer.config
    # Before registering: SIGUSR2's default action would kill the trainer the watchdog asks.
    stacks = _install_stack_dumps(config.run_dir)
    registered = _register(config.run_dir)
    if registered:
        trainer.progress = ProgressWriter(progress_path(os.getpid()), dist_util.rank())
    try:
        try:
            result = trainer.train()
        except DatasetChangedError as exc:
            print(f"nodeprep.trainer: not resumed: {exc} (here: --allow-dataset-change)",
                  file=sys.stderr)  # fmt: skip
            return 1
        except (CheckpointWriteError, TrainingStopped) as exc:
            # An expected outcome with a clear cause, not a bug: one sentence, no traceback.
            print(f"nodeprep.trainer: stopped at step {trainer.step}: {exc}", file=sys.stderr)
            return 1
        if result.preempted:
            return EXIT_PREEMPTED
        if args.state_hash_out and dist_util.rank() == 0:
            args.state_hash_out.write_text(result.state_hash + "\n")
        if args.final_state_out:
            state = final_state(trainer.model, trainer.optimizer, trainer.extras)
            torch.save(state, _per_rank(args.final_state_out))
        return 0 if result.finished else 1
    finally:
        if trainer.progress is not None:
            trainer.progress.close()
        if registered:
            contract.unregister()
        faulthandler.unregister(contract.STACKS_SIGNAL)
        stacks.close()
        # No destroy_process_group: after a stop a peer may be gone already and it waits on
        # that peer (seen: a rank that had been stopped, then SIGTERMed, never exited), and
        # once, on a loaded machine, a finished run's ranks stayed in it after "done" until
        # killed. Everything the run must keep is durable by now; the process is leaving and
        # the kernel closes its sockets.


def _trainer(args: argparse.Namespace) -> Trainer | str:
    """The trainer, or one sentence saying why it cannot start (exit 2)."""
    try:
        device = setup_distributed(args.device)
    except ValueError as exc:  # a wrong NODEPREP_COLLECTIVE_TIMEOUT_S
        return str(exc)
    config = _config(args, device)
    config.run_dir.mkdir(parents=True, exist_ok=True)
    try:
        return Trainer(config)
    except DataDirError as exc:
        return str(exc)


def _per_rank(path: Path) -> Path:
    """Rank 0 writes ``path`` itself, rank r ``path.rank<r>``: each rank's RNG differs."""
    rank = dist_util.rank()
    return path if rank == 0 else path.with_name(f"{path.name}.rank{rank}")


def _install_stack_dumps(run_dir: Path) -> TextIO:
    """On STACKS_SIGNAL, every thread's Python stack is appended to this rank's dump file.

    faulthandler writes from the signal handler itself, so a rank stuck inside a collective
    (C code that never returns to the interpreter) still answers.
    """
    path = contract.stack_dump_path(run_dir, dist_util.rank(), os.getpid())
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open as long as the handler
    faulthandler.register(contract.STACKS_SIGNAL, file=handle, all_threads=True, chain=False)
    return handle


def _register(run_dir: Path) -> bool:
    try:
        contract.register(run_dir, time.time())
    except OSError as exc:
        logging.getLogger(__name__).warning(
            "cannot register with the heartbeat watchdog (%s); set NODEPREP_RUN_DIR", exc
        )
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
