"""The trainer's data flags refuse bad input with one sentence and exit 2, before training."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def trainer(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "nodeprep.trainer", "--run-dir", str(tmp_path / "run"),
            "--steps", "2", "--checkpoint-every", "1", *extra]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (("--cache", "/tmp/c"), "--cache keeps --data's preprocessed shards: give --data DIR too"),
        (("--data", "/nonexistent/nodeprep-data"), "--data /nonexistent/nodeprep-data: cannot "
         "read the manifest"),
    ],
)  # fmt: skip
def test_a_bad_data_flag_is_one_sentence_and_exit_2(
    tmp_path: Path, extra: tuple[str, ...], said: str
) -> None:
    done = trainer(tmp_path, *extra)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize(
    ("extra", "env", "said"),
    [
        (("--min-step-s", "-1"), {}, "--min-step-s must be between 0 and 3600 seconds"),
        ((), {"RANK": "0", "WORLD_SIZE": "1", "NODEPREP_COLLECTIVE_TIMEOUT_S": "soon"},
         "NODEPREP_COLLECTIVE_TIMEOUT_S='soon' is not a number of seconds"),
    ],
)  # fmt: skip
def test_pacing_and_the_collective_timeout_refuse_bad_values(
    tmp_path: Path, extra: tuple[str, ...], env: dict[str, str], said: str
) -> None:
    argv = [sys.executable, "-m", "nodeprep.trainer", "--run-dir", str(tmp_path / "run"),
            "--steps", "2", "--checkpoint-every", "1", *extra]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, **env})  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_pacing_leaves_the_training_state_alone(tmp_path: Path) -> None:
    """--min-step-s only waits: the final state hash is the unpaced run's."""
    hashes = []
    for name, extra in (("plain", ()), ("paced", ("--min-step-s", "0.2"))):
        done = trainer(tmp_path / name, "--model-mb", "0.1", *extra)
        assert done.returncode == 0, done.stderr
        hashes.append(done.stdout.strip().splitlines()[-1])
    assert hashes[0].startswith("done step=2 state_sha256=")
    assert hashes[0] == hashes[1]
