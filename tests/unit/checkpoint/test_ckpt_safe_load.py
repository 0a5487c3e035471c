"""A crafted pickle is refused even when its manifest was forged to match, and never runs."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path

import torch

from nodeprep.checkpoint import commit_checkpoint, load_latest


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def _payloads(weight: object, step: int) -> dict[str, object]:
    return {"model.pt": {"w": weight}, "train.pt": {"step": step}}


def test_malicious_pickle_with_forged_manifest_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    commit_checkpoint(root, 1, "full", _payloads(torch.ones(3), 1))
    evil = commit_checkpoint(root, 2, "full", _payloads(torch.ones(3), 2))
    marker = tmp_path / "pwned"
    blob = pickle.dumps(_Payload(marker))
    (evil / "model.pt").write_bytes(blob)
    manifest = json.loads((evil / "manifest.json").read_text())
    manifest["files"]["model.pt"] = {"size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    (evil / "manifest.json").write_text(json.dumps(manifest))

    loaded = load_latest(root)

    assert not marker.exists()
    assert loaded is not None
    assert loaded.manifest.step == 1
    assert "weights-only loader" in loaded.rejected[0][1]


def test_malicious_torch_save_archive_is_refused(tmp_path: Path) -> None:
    """The same payload inside a real torch.save zip archive (the realistic attack)."""
    root = tmp_path / "ckpt"
    commit_checkpoint(root, 1, "full", _payloads(torch.ones(3), 1))
    marker = tmp_path / "pwned"
    commit_checkpoint(root, 2, "full", _payloads(_Payload(marker), 2))
    loaded = load_latest(root)
    assert not marker.exists()
    assert loaded is not None
    assert loaded.manifest.step == 1
