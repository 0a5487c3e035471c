"""Committed checkpoints verify; damaged ones are rejected and loading falls back, saying why."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import torch

from nodeprep.checkpoint import (
    CheckpointInvalidError,
    commit_checkpoint,
    committed,
    load_latest,
    verify,
)
from nodeprep.checkpoint.durable import sweep_leftovers


def _commit(root: Path, step: int) -> Path:
    payload = {"w": torch.full((1000,), float(step)), "step": step}
    return commit_checkpoint(root, step, "full", {"model.pt": payload, "train.pt": {"step": step}})


def test_commit_writes_manifest_with_sizes_and_hashes(tmp_path: Path) -> None:
    path = _commit(tmp_path, 5)
    manifest = verify(path)
    assert path.name == "ckpt-0000000005-full"
    assert manifest.step == 5
    assert sorted(manifest.files) == ["model.pt", "train.pt"]
    assert manifest.files["model.pt"].size == (path / "model.pt").stat().st_size
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def _truncate(path: Path) -> None:
    os.truncate(path / "model.pt", (path / "model.pt").stat().st_size // 2)


def _flip_byte(path: Path) -> None:
    target = path / "model.pt"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))


def _remove_file(path: Path) -> None:
    (path / "train.pt").unlink()


def _forge_manifest(path: Path) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["model.pt"]["sha256"] = "0" * 64
    (path / "manifest.json").write_text(json.dumps(manifest))


def _drop_manifest(path: Path) -> None:
    (path / "manifest.json").unlink()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_truncate, "bytes, manifest says"),
        (_flip_byte, "sha256 does not match"),
        (_remove_file, "train.pt is missing"),
        (_forge_manifest, "sha256 does not match"),
        (_drop_manifest, "no manifest.json"),
    ],
)
def test_damaged_checkpoint_is_rejected_and_older_one_loads(
    tmp_path: Path, damage: object, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    _commit(tmp_path, 10)
    newest = _commit(tmp_path, 20)
    damage(newest)  # type: ignore[operator]
    with pytest.raises(CheckpointInvalidError, match=reason):
        verify(newest)
    with caplog.at_level(logging.WARNING):
        loaded = load_latest(tmp_path)
    assert loaded is not None
    assert loaded.manifest.step == 10
    assert torch.equal(loaded.payloads["model.pt"]["w"], torch.full((1000,), 10.0))
    assert loaded.rejected[0][0] == newest.name
    assert reason in loaded.rejected[0][1]
    assert "ckpt-0000000010-full" in caplog.text
    assert reason in caplog.text


def test_nothing_valid_means_no_checkpoint(tmp_path: Path) -> None:
    _drop_manifest(_commit(tmp_path, 1))
    assert load_latest(tmp_path) is None


def test_partial_writes_are_invisible_and_swept(tmp_path: Path) -> None:
    _commit(tmp_path, 1)
    partial = tmp_path / ".tmp-ckpt-0000000002-full-deadbeef"
    partial.mkdir()
    (partial / "model.pt").write_bytes(b"half")
    trash = tmp_path / ".trash-ckpt-0000000000-full-deadbeef"
    trash.mkdir()
    assert [p.name for p in committed(tmp_path)] == ["ckpt-0000000001-full"]
    assert sorted(sweep_leftovers(tmp_path)) == sorted([partial.name, trash.name])
    assert not partial.exists()
    assert not trash.exists()


def test_manifest_naming_a_different_step_is_rejected(tmp_path: Path) -> None:
    path = _commit(tmp_path, 3)
    path.rename(tmp_path / "ckpt-0000000009-full")
    with pytest.raises(CheckpointInvalidError, match="do not match name"):
        verify(tmp_path / "ckpt-0000000009-full")
