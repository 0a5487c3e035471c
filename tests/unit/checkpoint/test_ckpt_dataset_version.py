"""A checkpoint remembers the data set version it was trained on; a resume on other data is
refused with both hashes named, unless the change is allowed."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from nodeprep.checkpoint import DatasetChangedError

from .conftest import make_run

OLD, NEW = "a" * 64, "b" * 64


def _saved(checkpointer_factory: Any, version: str | None) -> None:
    run = make_run()
    ckpt = checkpointer_factory(run, dataset_version=version)
    run.train(2)
    ckpt.save(2)
    ckpt.wait()


def test_resume_on_another_data_set_version_is_refused_naming_both(
    checkpointer_factory: Any,
) -> None:
    _saved(checkpointer_factory, OLD)
    fresh = checkpointer_factory(make_run(init_seed=4), dataset_version=NEW)
    with pytest.raises(DatasetChangedError) as refused:
        fresh.restore()
    said = str(refused.value)
    assert f"was trained on data set version {OLD} and this run has {NEW}" in said
    assert "allow_dataset_change=True" in said


def test_the_same_version_or_an_allowed_change_resumes(
    checkpointer_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _saved(checkpointer_factory, OLD)
    assert checkpointer_factory(make_run(init_seed=4), dataset_version=OLD).restore() == 2
    allowed = checkpointer_factory(
        make_run(init_seed=4), dataset_version=NEW, allow_dataset_change=True
    )
    with caplog.at_level(logging.WARNING):
        assert allowed.restore() == 2
    assert f"trained on data set {OLD}; resuming on {NEW} as allowed" in caplog.text


@pytest.mark.parametrize(("saved", "now"), [(None, NEW), (OLD, None)])
def test_no_version_on_either_side_is_not_a_change(
    checkpointer_factory: Any, saved: str | None, now: str | None
) -> None:
    _saved(checkpointer_factory, saved)
    assert checkpointer_factory(make_run(init_seed=4), dataset_version=now).restore() == 2
