"""The trainer's data flags refuse bad input with one sentence and exit 2, before training."""

from __future__ import annotations

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
