"""The trainer's command line refuses bad input with one clear message and changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeprep.trainer.__main__ import main


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [("--steps", "0", "--steps must be at least 1"),
     ("--checkpoint-every", "-3", "--checkpoint-every must be at least 1"),
     ("--model-mb", "0", "--model-mb > 0"),
     ("--until-step", "-1", "--until-step must be a step (1 or more), or 0 for --steps")],
)  # fmt: skip
def test_bad_arguments_exit_2_and_create_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    run_dir = tmp_path / "run"
    args = ["--run-dir", str(run_dir), "--steps", "10", flag, value]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert not run_dir.exists()
