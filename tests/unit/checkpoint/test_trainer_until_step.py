"""--until-step ends a run at a step as if it were the last while the learning-rate schedule
keeps spanning --steps: how a drill replays an interrupted job up to the step it reached."""

from __future__ import annotations

from pathlib import Path

from nodeprep.trainer.__main__ import main

ARGS = ["--steps", "40", "--checkpoint-every", "5", "--model-mb", "0.05", "--seed", "3",
        "--threads", "1", "--device", "cpu"]  # fmt: skip


def _hash(run_dir: Path, *more: str) -> str:
    out = run_dir / "hash.txt"
    assert main(["--run-dir", str(run_dir), *ARGS, *more, "--state-hash-out", str(out)]) == 0
    return out.read_text().strip()


def test_a_run_to_a_step_equals_an_interrupted_one_resumed_to_it(tmp_path: Path) -> None:
    straight = _hash(tmp_path / "straight", "--until-step", "12")
    # Again in the same directory: it resumes at step 12, trains nothing, same state.
    assert _hash(tmp_path / "straight", "--until-step", "12") == straight
    # Stopped at 7 (a checkpoint at 5 and the final one at 7), then resumed to 12.
    _hash(tmp_path / "twice", "--until-step", "7")
    assert _hash(tmp_path / "twice", "--until-step", "12") == straight
    # A run whose last step is 12 has another schedule: not the same state.
    assert _hash(tmp_path / "short", "--steps", "12") != straight
