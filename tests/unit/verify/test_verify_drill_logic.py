"""The smoke drill's judgement and command line (the drill itself runs in the integration tier)."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest

from collection_plugins import load, run_module
from nodeprep.smoke.__main__ import main as smoke_main
from nodeprep.smoke.drill import DrillConfig, RunOutcome, choose_kill_step, judge, trainer_argv

CONFIG = DrillConfig(Path("/w"), steps=24, checkpoint_every=4)
GOOD = "a" * 64


def outcome(rc: int, final: str | None, start: int | None = 0, resumed: bool = False) -> RunOutcome:
    return RunOutcome(rc, start_step=start, resumed=resumed, final_hash=final, last_step=11)


def test_random_kill_step_leaves_a_checkpoint_behind_and_work_ahead() -> None:
    steps = {choose_kill_step(CONFIG, random.Random(seed)) for seed in range(200)}
    assert min(steps) == 5
    assert max(steps) == 23


def test_launcher_prefixes_the_trainer_command() -> None:
    config = DrillConfig(Path("/w"), launcher=("apptainer", "exec", "img.sif"), python="python3")
    argv = trainer_argv(config, Path("/w/drill"))
    assert argv[:5] == ["apptainer", "exec", "img.sif", "python3", "-m"]
    assert argv[argv.index("--run-dir") + 1] == "/w/drill"


def test_bit_exact_resume_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APPTAINER_CONTAINER", raising=False)
    monkeypatch.delenv("SINGULARITY_CONTAINER", raising=False)
    passed, detail = judge(
        CONFIG, 11, outcome(0, GOOD), outcome(-signal.SIGKILL, None), outcome(0, GOOD, 8, True)
    )
    assert passed
    assert "SIGKILL after step 11, resumed from step 8" in detail
    assert "outside any image" in detail


def test_a_different_hash_fails() -> None:
    passed, detail = judge(
        CONFIG, 11, outcome(0, GOOD), outcome(-signal.SIGKILL, None), outcome(0, "b" * 64, 8, True)
    )
    assert not passed
    assert "resume is not bit-exact" in detail


def test_a_run_that_was_not_killed_or_did_not_resume_fails() -> None:
    missed = judge(CONFIG, 11, outcome(0, GOOD), outcome(0, GOOD), outcome(0, GOOD, 24, True))
    assert not missed[0]
    assert "was not killed at step 11" in missed[1]
    fresh = judge(
        CONFIG, 11, outcome(0, GOOD), outcome(-signal.SIGKILL, None), outcome(0, GOOD, 0, False)
    )
    assert not fresh[0]
    assert "did not resume from a checkpoint" in fresh[1]


def test_a_drill_run_inside_an_image_says_which(monkeypatch: pytest.MonkeyPatch) -> None:
    """verify runs the whole drill in the node's image (no launcher): Apptainer's variable
    names the image."""
    monkeypatch.setenv("APPTAINER_CONTAINER", "/opt/nodeprep/images/trainer.sif")
    passed, detail = judge(
        CONFIG, 11, outcome(0, GOOD), outcome(-signal.SIGKILL, None), outcome(0, GOOD, 8, True)
    )
    assert passed
    assert "24 steps inside image /opt/nodeprep/images/trainer.sif, SIGKILL after" in detail


def test_a_drill_on_a_data_set_passes_it_to_every_run_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("APPTAINER_CONTAINER", raising=False)
    monkeypatch.delenv("SINGULARITY_CONTAINER", raising=False)
    config = DrillConfig(Path("/w"), data=Path("/data/datasets/sample"), workers=2)
    argv = trainer_argv(config, Path("/w/drill"))
    assert argv[argv.index("--data") + 1] == "/data/datasets/sample"
    assert argv[argv.index("--workers") + 1] == "2"
    assert "--data" not in trainer_argv(CONFIG, Path("/w/drill"))
    passed, detail = judge(
        config, 11, outcome(0, GOOD), outcome(-signal.SIGKILL, None), outcome(0, GOOD, 8, True)
    )
    assert passed
    assert "24 steps outside any image on data set /data/datasets/sample with 2 loader " in detail


def test_workers_without_a_data_set_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        smoke_main(["--work-dir", "/w", "--workers", "2"])
    assert ended.value.code == 2
    assert "--workers must be 0 or more, and needs --data" in capsys.readouterr().err


def test_the_module_binds_the_data_set_into_the_image_read_only() -> None:
    module = load("smoke_drill")
    launcher = ["apptainer", "exec", "--no-privs", "/opt/nodeprep/trainer.sif"]
    assert module.bind_read_only(launcher, "/data/sets/a") == [
        "apptainer", "exec", "--no-privs", "--bind", "/data/sets/a:/data/sets/a:ro",
        "/opt/nodeprep/trainer.sif",
    ]  # fmt: skip
    params = {"drill": "kill", "steps": 24, "checkpoint_every": 4, "seed": 0, "model_mb": 0.25,
              "kill_step": 0, "data": "/data/sets/a", "workers": 2}  # fmt: skip
    assert module.drill_args(params)[-4:] == ["--data", "/data/sets/a", "--workers", "2"]
    assert module.drill_args({**params, "drill": "heartbeat"}) == ["--heartbeat"]


def test_a_data_set_that_is_not_staged_fails_the_drill_saying_so(tmp_path: Path) -> None:
    """Run as Ansible runs it: before any Python or image is tried, the check fails."""
    given = {"data": str(tmp_path / "absent"), "marker_dir": str(tmp_path), "python": "false"}
    _, answered = run_module("smoke_drill", given, tmp_path)
    (check,) = answered["checks"]
    assert (check["check"], check["passed"], check["skip"]) == ("smoke.drill", False, "")
    assert check["detail"] == (
        f"smoke_data {tmp_path / 'absent'} is not a directory on this node: stage the data set "
        "(the dataset role) first, or leave smoke_data empty"
    )
