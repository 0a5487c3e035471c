"""The trainer's --data reader: records from shards, checked against their manifest first."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nodeprep.data import build_manifest
from nodeprep.trainer import shards
from nodeprep.trainer.model import CLASSES, INPUT_DIM


def test_records_come_from_every_shard_and_a_short_tail_is_left_out(tmp_path: Path) -> None:
    version = shards.write_dataset(tmp_path, shards=2, size=10 * INPUT_DIM + 5, seed=3)
    data, loaded = shards.load(tmp_path)
    assert loaded == version == build_manifest(tmp_path).version
    assert data.inputs.shape == (20, INPUT_DIM)
    assert float(data.inputs.min()) >= -1.0
    assert float(data.inputs.max()) <= 1.0
    assert int(data.labels.max()) < CLASSES
    first = (tmp_path / "shards" / "shard-000.bin").read_bytes()[:INPUT_DIM]
    expected = torch.tensor(list(first), dtype=torch.float32) / 127.5 - 1.0
    assert torch.equal(data.inputs[0], expected)
    again, _ = shards.load(tmp_path)
    assert torch.equal(again.labels, data.labels)  # the teacher is fixed


def test_a_truncated_shard_or_a_missing_manifest_is_refused(tmp_path: Path) -> None:
    shards.write_dataset(tmp_path, shards=1, size=4 * INPUT_DIM, seed=1)
    shard = tmp_path / "shards" / "shard-000.bin"
    shard.write_bytes(shard.read_bytes()[:-1])
    with pytest.raises(shards.DataDirError, match=r"differs from its manifest: shards/shard-000"):
        shards.load(tmp_path)
    (tmp_path / "dataset-manifest.json").unlink()
    with pytest.raises(shards.DataDirError, match="cannot read the manifest"):
        shards.load(tmp_path)


def test_the_script_writes_a_data_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert shards.main([str(tmp_path / "d"), "--shards", "3", "--shard-bytes", "640"]) == 0
    assert "3 shards of 640 bytes, version " in capsys.readouterr().out
    data, _ = shards.load(tmp_path / "d")
    assert len(data) == 30


def test_the_cache_gives_the_same_tensors_and_survives_a_torn_entry(tmp_path: Path) -> None:
    root, cache = tmp_path / "data", tmp_path / "cache"
    shards.write_dataset(root, shards=2, size=8 * INPUT_DIM, seed=5)
    plain, _ = shards.load(root)
    first, _ = shards.load(root, cache)
    entries = sorted(cache.rglob("*.entry"))
    assert len(entries) == 2
    entries[0].write_bytes(entries[0].read_bytes()[:-7])  # torn after a crash
    second, _ = shards.load(root, cache)
    for data in (first, second):
        assert torch.equal(data.inputs, plain.inputs)
        assert torch.equal(data.labels, plain.labels)
    assert len(sorted(cache.rglob("*.entry"))) == 2  # recomputed and stored again
