"""The smoke drill: train, SIGKILL at a random step, resume, and demand the same final state.

Two runs of the reference trainer with the same seed and steps: one uninterrupted, one
killed with SIGKILL (no handler can run, as with an OOM kill or a power cut) right after a
chosen step and then started again in the same run directory. The resumed run must end
with a state hash equal, bit for bit, to the uninterrupted one. Anything else - a hash
that differs, a run that never resumed, a kill that came too late - fails the drill.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

_DONE = re.compile(r"^done step=(\d+) state_sha256=([0-9a-f]{64})$")
_START = re.compile(r"^start step=(\d+) resumed=(True|False)$")
_STEP = re.compile(r"^step (\d+) ")


@dataclass(frozen=True)
class DrillConfig:
    work_dir: Path
    steps: int = 24
    checkpoint_every: int = 4
    seed: int = 0
    kill_step: int | None = None  # None: a random step that leaves a checkpoint behind it
    model_mb: float = 0.25
    launcher: tuple[str, ...] = ()  # e.g. ("apptainer", "exec", "--no-privs", IMAGE)
    python: str = "python3"
    deadline_s: float = 300.0
    data: Path | None = None  # a staged data set (the trainer's --data); None: synthetic data
    workers: int = 0  # the trainer's --workers: loader worker processes over --data


@dataclass
class RunOutcome:
    returncode: int
    start_step: int | None = None
    resumed: bool = False
    final_hash: str | None = None
    last_step: int = 0
    tail: list[str] = field(default_factory=list)


@dataclass
class DrillResult:
    passed: bool
    detail: str
    kill_step: int
    reference_hash: str | None
    resumed_hash: str | None
    resumed_from: int | None
    seconds: float
    inside_image: bool


def choose_kill_step(config: DrillConfig, rng: random.Random) -> int:
    """A step after the first checkpoint and before the last step, so resume has work to do."""
    if config.kill_step is not None:
        return config.kill_step
    return rng.randint(config.checkpoint_every + 1, config.steps - 1)


def trainer_argv(config: DrillConfig, run_dir: Path) -> list[str]:
    return [
        *config.launcher,
        config.python,
        "-m",
        "nodeprep.trainer",
        "--run-dir",
        str(run_dir),
        "--steps",
        str(config.steps),
        "--seed",
        str(config.seed),
        "--checkpoint-every",
        str(config.checkpoint_every),
        "--model-mb",
        str(config.model_mb),
        "--threads",
        "1",
        "--sync-save",
        *(["--data", str(config.data), "--workers", str(config.workers)] if config.data else []),
    ]


def gpu_driver_loaded() -> bool:
    """Whether the NVIDIA driver is loaded: the trainers may then take the GPU."""
    return Path("/proc/driver/nvidia").exists()


def _end_all(started: list[subprocess.Popen[str]]) -> None:
    """SIGKILL the process group of every trainer still running (each has its own session)."""
    for proc in started:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def run_trainer(
    argv: Sequence[str],
    deadline: float,
    kill_after_step: int | None,
    started: list[subprocess.Popen[str]] | None = None,
) -> RunOutcome:
    """Run one trainer; SIGKILL its whole process group right after ``kill_after_step``.
    The process is added to ``started``, so that whoever gave the list can end it."""
    env = {**os.environ, "NODEPREP_RUN_DIR": str(Path(argv[argv.index("--run-dir") + 1]))}
    proc = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )
    if started is not None:
        started.append(proc)
    outcome = RunOutcome(returncode=0)
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.strip()
            outcome.tail = [*outcome.tail[-19:], line]
            _parse(line, outcome)
            if kill_after_step is not None and outcome.last_step >= kill_after_step:
                os.killpg(proc.pid, signal.SIGKILL)
                break
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                outcome.tail.append("drill deadline passed; trainer killed")
                break
        outcome.returncode = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return outcome


def _parse(line: str, outcome: RunOutcome) -> None:
    if match := _STEP.match(line):
        outcome.last_step = int(match.group(1))
    elif match := _START.match(line):
        outcome.start_step, outcome.resumed = int(match.group(1)), match.group(2) == "True"
    elif match := _DONE.match(line):
        outcome.final_hash = match.group(2)


def run_drill(config: DrillConfig, rng: random.Random | None = None) -> DrillResult:
    started = time.monotonic()
    deadline = started + config.deadline_s
    kill_step = choose_kill_step(config, rng or random.Random())
    config.work_dir.mkdir(parents=True, exist_ok=True)
    reference_argv = trainer_argv(config, config.work_dir / "reference")
    drill_argv = trainer_argv(config, config.work_dir / "drill")
    trainers: list[subprocess.Popen[str]] = []
    try:
        if gpu_driver_loaded():  # one trainer at a time: a GPU may admit one process only
            reference = run_trainer(reference_argv, deadline, None, trainers)
            killed = run_trainer(drill_argv, deadline, kill_step, trainers)
            resumed = run_trainer(drill_argv, deadline, None, trainers)
        else:
            # The uninterrupted run beside the killed one and its resume: each trainer runs
            # one thread, and on a slow node (the lab's emulated VM) the drill takes two
            # runs' time instead of three.
            with ThreadPoolExecutor(max_workers=1) as beside:
                uninterrupted = beside.submit(run_trainer, reference_argv, deadline, None, trainers)
                try:
                    killed = run_trainer(drill_argv, deadline, kill_step, trainers)
                    resumed = run_trainer(drill_argv, deadline, None, trainers)
                except BaseException:
                    _end_all(trainers)  # the reference run too, or the pool waits for it
                    raise
                reference = uninterrupted.result()
    finally:
        _end_all(trainers)
    passed, detail = judge(config, kill_step, reference, killed, resumed)
    return DrillResult(
        passed=passed,
        detail=detail,
        kill_step=kill_step,
        reference_hash=reference.final_hash,
        resumed_hash=resumed.final_hash,
        resumed_from=resumed.start_step if resumed.resumed else None,
        seconds=round(time.monotonic() - started, 3),
        inside_image=bool(config.launcher or image_around()),
    )


def image_around() -> str:
    """The Apptainer/Singularity image this process runs in ('' outside any): the drill may
    run inside the image itself, with no launcher, as verify runs it on nodes with one."""
    return os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER", "")


def _where(config: DrillConfig) -> str:
    if config.launcher:
        return f"inside {shlex.join(config.launcher)}"
    image = image_around()
    return f"inside image {image}" if image else "outside any image"


def judge(
    config: DrillConfig,
    kill_step: int,
    reference: RunOutcome,
    killed: RunOutcome,
    resumed: RunOutcome,
) -> tuple[bool, str]:
    """One sentence on what happened; passed only when the resumed hash equals the reference."""
    where = _where(config)
    if reference.final_hash is None:
        return False, f"the uninterrupted run ({where}) did not finish: {_tail(reference)}"
    if killed.returncode != -signal.SIGKILL or killed.final_hash is not None:
        return False, (
            f"the trainer was not killed at step {kill_step} (exit {killed.returncode}, "
            f"last step {killed.last_step}); raise --steps"
        )
    if resumed.final_hash is None or not resumed.resumed:
        return False, f"the killed run did not resume from a checkpoint: {_tail(resumed)}"
    on_data = (
        f" on data set {config.data} with {config.workers} loader worker(s)" if config.data else ""
    )
    summary = (
        f"{config.steps} steps {where}{on_data}, SIGKILL after step {killed.last_step}, "
        f"resumed from step {resumed.start_step}"
    )
    if resumed.final_hash != reference.final_hash:
        return False, (
            f"{summary}: final state {resumed.final_hash[:16]} differs from the uninterrupted "
            f"run's {reference.final_hash[:16]}; resume is not bit-exact"
        )
    return True, f"{summary}: final state sha256 {resumed.final_hash[:16]} matches bit for bit"


def _tail(outcome: RunOutcome) -> str:
    return f"exit {outcome.returncode}; last output: {' | '.join(outcome.tail[-3:]) or 'none'}"
