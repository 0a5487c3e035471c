"""The step recorded inside ``train.pt`` must be the step the manifest and the name claim.

A checkpoint whose payloads come from another step (copied in, manifest recomputed to
match) passes every size and hash check; only this check stops a resume that would
report step 60 while holding step-50 state.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from nodeprep.checkpoint import CheckpointInvalidError, commit_checkpoint, load_verified
from nodeprep.checkpoint.manifest import MANIFEST_NAME, FileEntry, Manifest, sha256_file

from .conftest import make_run


def _transplant(source: Path, target: Path) -> None:
    """Copy ``source``'s payload files into ``target`` and rewrite its manifest to match them."""
    manifest = Manifest.from_json((target / MANIFEST_NAME).read_text(encoding="utf-8"))
    files: dict[str, FileEntry] = {}
    for name in manifest.files:
        shutil.copyfile(source / name, target / name)
        copied = target / name
        files[name] = FileEntry(size=copied.stat().st_size, sha256=sha256_file(copied))
    forged = Manifest(manifest.step, manifest.layer, manifest.created, files, extra=manifest.extra)
    (target / MANIFEST_NAME).write_text(forged.to_json(), encoding="utf-8")


def test_payloads_of_another_step_are_rejected_and_restore_falls_back(
    checkpointer_factory: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = make_run()
    ckpt = checkpointer_factory(run)
    run.train(5)
    ckpt.save(50)
    run.train(5)
    ckpt.save(60)
    root = tmp_path / "ckpt"
    older, newer = root / "ckpt-0000000050-full", root / "ckpt-0000000060-full"
    _transplant(older, newer)
    expected = load_verified(older)[1]["model.pt"]

    with pytest.raises(CheckpointInvalidError, match="step 50") as raised:
        load_verified(newer)
    assert newer.name in str(raised.value)
    assert "step 60" in str(raised.value)

    fresh = make_run(init_seed=7)
    with caplog.at_level(logging.WARNING):
        assert checkpointer_factory(fresh).restore() == 50
    for name, tensor in fresh.model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    assert f"{newer.name}: train.pt records step 50" in caplog.text
    assert "resuming from ckpt-0000000050-full" in caplog.text


@pytest.mark.parametrize(
    "payloads",
    [
        {"model.pt": {"w": torch.ones(3)}},
        {"model.pt": {"w": torch.ones(3)}, "train.pt": {"config": {}}},
        {"model.pt": {"w": torch.ones(3)}, "train.pt": {"step": "2"}},
        {"model.pt": {"w": torch.ones(3)}, "train.pt": [2]},
    ],
    ids=["no-train-pt", "no-step", "step-not-int", "not-a-dict"],
)
def test_checkpoint_without_an_integer_step_is_rejected(
    tmp_path: Path, payloads: dict[str, Any]
) -> None:
    path = commit_checkpoint(tmp_path, 2, "full", payloads)
    with pytest.raises(CheckpointInvalidError, match=r"no train\.pt payload with an integer step"):
        load_verified(path)
    assert path.is_dir()  # rejected on load, never deleted
