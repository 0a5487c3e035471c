"""A run whose weights or loss turned NaN never writes a checkpoint that resume or retention
would take for a good one: refused (the default) or written aside under quarantine/."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from nodeprep.checkpoint import Checkpointer, CheckpointWriteError, NonFiniteStateError, committed
from nodeprep.checkpoint import verify as verify_checkpoint
from nodeprep.checkpoint.finite import nonfinite_reason
from nodeprep.trainer.__main__ import main as trainer_main

from .conftest import make_run, run_trainer

TRAINER = ["--steps", "60", "--seed", "3", "--checkpoint-every", "10", "--model-mb", "0.25",
           "--drill-nan-at", "25"]  # fmt: skip


def _poisoned(run: Any) -> None:
    with torch.no_grad():
        run.model[2].weight.fill_(float("nan"))


def test_a_nan_weight_is_refused_named_and_the_good_checkpoint_stays_newest(
    checkpointer_factory: Any,
) -> None:
    run = make_run()
    ckpt: Checkpointer = checkpointer_factory(run, keep=1)
    run.train(1)
    ckpt.save(1)
    _poisoned(run)
    ckpt.save(2)
    ckpt.wait()
    assert _steps(ckpt.root) == [1]  # keep=1 did not drop it
    error = ckpt.failures[-1].error or ""
    assert "checkpoint of step 2 not committed: 1 parameter tensor(s) hold NaN or Inf" in error
    assert "(2.weight)" in error
    assert "the newest checkpoint is" in error
    assert error.endswith("ckpt-0000000001-full")
    with pytest.raises(CheckpointWriteError, match="step 2 not committed"):
        ckpt.ensure_durable(2)
    restored = make_run(init_seed=9)
    assert checkpointer_factory(restored).restore() == 1


def test_a_nan_loss_is_refused_and_stops_a_run_that_stops_on_errors(
    checkpointer_factory: Any,
) -> None:
    run = make_run()
    ckpt: Checkpointer = checkpointer_factory(run, stop_on_error=True)
    run.train(1)
    with pytest.raises(NonFiniteStateError, match=r"step 1 not committed: the loss is inf"):
        ckpt.save(1, loss=float("inf"))
    assert committed(ckpt.root) == []


def _module(**tensors: torch.Tensor) -> torch.nn.Module:
    module = torch.nn.Module()
    for name, tensor in tensors.items():
        module.register_parameter(name, torch.nn.Parameter(tensor, requires_grad=False))
    return module


def test_the_check_sums_first_and_looks_closer_only_where_a_sum_is_not_finite() -> None:
    big = torch.full((4,), 3e38)  # each finite, the sum overflows to inf
    assert torch.isinf(big.sum())
    fine = _module(big=big, f16=torch.full((3,), 60000.0, dtype=torch.float16),
                   counts=torch.tensor([2**62, 2**62]), plain=torch.ones(5))  # fmt: skip
    assert nonfinite_reason(fine) is None
    # NaN and Inf in any floating dtype, and an Inf beside a -Inf (their sum is NaN).
    mixed = torch.ones(6)
    mixed[1], mixed[4] = float("inf"), float("-inf")
    complex_nan = torch.zeros(3, dtype=torch.complex64)
    complex_nan[2] = complex(0.0, float("nan"))
    bad = _module(a=mixed, b=torch.ones(2), c=torch.tensor([float("nan")], dtype=torch.bfloat16),
                  d=complex_nan, e=big)  # fmt: skip
    assert nonfinite_reason(bad) == "3 parameter tensor(s) hold NaN or Inf (a, c, d)"
    # 8-bit floats have no isfinite in torch: they are widened when looked at closely.
    eight = torch.tensor([1.0, 448.0], dtype=torch.float8_e4m3fn)
    assert nonfinite_reason(_module(f8=eight)) is None
    assert nonfinite_reason(_module(f8=torch.tensor([float("nan")]).to(torch.float8_e4m3fn))) == (
        "1 parameter tensor(s) hold NaN or Inf (f8)"
    )
    assert nonfinite_reason(_module()) is None


def test_quarantine_writes_aside_where_resume_and_retention_never_look(
    checkpointer_factory: Any,
) -> None:
    run = make_run()
    ckpt: Checkpointer = checkpointer_factory(run, keep=1, nonfinite="quarantine")
    run.train(1)
    ckpt.save(1)
    _poisoned(run)
    ckpt.save(2)
    ckpt.save(3)
    ckpt.wait()
    assert _steps(ckpt.root) == [1]
    assert _steps(ckpt.root / "quarantine") == [3]  # retention applies there too, on its own
    verify_checkpoint(committed(ckpt.root / "quarantine")[0])  # whole, for the post-mortem
    assert "written aside to" in (ckpt.failures[-1].error or "")
    assert checkpointer_factory(make_run(init_seed=9)).restore() == 1


def test_an_unknown_policy_is_refused() -> None:
    run = make_run()
    with pytest.raises(ValueError, match="nonfinite must be one of"):
        Checkpointer(Path("/nonexistent"), run.model, run.optimizer, nonfinite="keep")


def test_the_trainer_whose_loss_turns_nan_commits_nothing_after_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = run_trainer(run_dir, *TRAINER)
    assert done.returncode == 1, done.stderr
    assert re.search(r"stopped at step 60: checkpoint of step 60 not committed: "
                     r"the loss is nan", done.stderr), done.stderr  # fmt: skip
    assert "the newest checkpoint is" in done.stderr
    assert "ckpt-0000000020-full" in done.stderr
    assert sorted(_steps(run_dir / "checkpoints")) == [10, 20]
    for step in (30, 40, 50):
        assert f"checkpoint of step {step} not committed: the loss is nan" in done.stderr


def test_the_trainer_can_stop_at_the_first_nan_loss(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = run_trainer(run_dir, *TRAINER, "--stop-on-nonfinite-loss")
    assert done.returncode == 1, done.stderr
    assert "stopped at step 25: the loss is not finite (nan on rank 0) at step 25" in done.stderr
    assert "ckpt-0000000020-full" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--drill-nan-at", "-1"], "--drill-nan-at must be a step (1 or more), or 0 for no drill"),
        (["--workers", "-2"], "--workers must be 0 (load in the trainer) or more"),
        (["--nonfinite", "keep"], "argument --nonfinite: invalid choice: 'keep'"),
    ],
)
def test_a_bad_trainer_option_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str], said: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        trainer_main(["--run-dir", str(tmp_path), "--steps", "5", *option])
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


def _steps(root: Path) -> list[int]:
    return [int(path.name.split("-")[1]) for path in committed(root)]
