"""Save, keep training, restore into fresh objects, train again: the results are bit-exact."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import torch

from nodeprep.checkpoint import ResumableSampler, load_latest, rng

from .conftest import assert_same_state, make_run


@pytest.mark.parametrize("async_write", [False, True])
def test_resume_is_bit_exact(checkpointer_factory: Any, async_write: bool) -> None:
    original = make_run()
    ckpt = checkpointer_factory(original, async_write=async_write)
    original.train(7)
    ckpt.save(7)
    ckpt.wait()
    original.train(9)
    expected_python, expected_torch = random.getstate(), torch.get_rng_state()

    random.seed(123)
    torch.manual_seed(123)
    resumed = make_run(init_seed=99)  # everything must come from the checkpoint
    assert checkpointer_factory(resumed, async_write=async_write).restore() == 7
    resumed.train(9)
    assert_same_state(original, resumed)
    assert random.getstate() == expected_python
    assert torch.equal(torch.get_rng_state(), expected_torch)


def test_light_layer_holds_no_optimizer_and_full_is_preferred(
    checkpointer_factory: Any, tmp_path: Path
) -> None:
    run = make_run()
    ckpt = checkpointer_factory(run, async_write=False)
    run.train(2)
    ckpt.save(2, "full")
    run.train(2)
    ckpt.save(4, "light")
    light = load_latest(tmp_path / "ckpt", ("light",))
    assert light is not None
    assert sorted(light.payloads) == ["model.pt", "train.pt"]
    fresh = make_run(init_seed=5)
    assert checkpointer_factory(fresh).restore() == 2


def test_light_layer_is_an_opt_in_last_resort(checkpointer_factory: Any) -> None:
    run = make_run()
    ckpt = checkpointer_factory(run)
    run.train(3)
    ckpt.save(3, "light")
    fresh = make_run(init_seed=5)
    assert checkpointer_factory(fresh).restore() is None  # a fresh start replays bit-exact
    assert checkpointer_factory(fresh, resume_from_light=True).restore() == 3
    assert torch.equal(fresh.model[0].weight, run.model[0].weight)
    assert fresh.optimizer.state_dict()["state"] == {}


def test_rng_round_trip_survives_weights_only_load(tmp_path: Path) -> None:
    random.seed(4)
    torch.manual_seed(4)
    state = rng.capture()
    expected = (random.random(), torch.rand(3))
    torch.save(state, tmp_path / "rng.pt")
    random.seed(0)
    torch.manual_seed(0)
    rng.restore(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert random.random() == expected[0]
    assert torch.equal(torch.rand(3), expected[1])


def test_sampler_resumes_at_the_next_batch() -> None:
    sampler = ResumableSampler(64, 8, seed=3)
    for _ in range(11):  # crosses an epoch boundary (8 batches per epoch)
        sampler.next_batch()
    state = sampler.state_dict()
    expected = [sampler.next_batch() for _ in range(6)]
    other = ResumableSampler(64, 8, seed=3)
    other.load_state_dict(state)
    assert all(torch.equal(a, other.next_batch()) for a in expected)


def test_sampler_refuses_state_from_another_world_size() -> None:
    state = ResumableSampler(64, 8, seed=3, rank=0, world_size=2).state_dict()
    with pytest.raises(ValueError, match="same ones"):
        ResumableSampler(64, 8, seed=3).load_state_dict(state)


def test_back_to_back_async_saves_both_commit(checkpointer_factory: Any, tmp_path: Path) -> None:
    run = make_run(width=256)
    ckpt = checkpointer_factory(run, async_write=True, keep=5)
    for step in range(1, 5):
        run.train(1)
        ckpt.save(step)
    ckpt.wait()
    names = [p.name for p in (tmp_path / "ckpt").iterdir()]
    assert sorted(names) == [f"ckpt-{s:010d}-full" for s in range(1, 5)]
    loaded = load_latest(tmp_path / "ckpt")
    assert loaded is not None
    assert torch.equal(loaded.payloads["model.pt"]["0.weight"], run.model[0].weight)
