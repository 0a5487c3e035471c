"""Format version 2: large tensors as raw aligned bytes, loaded back exactly; version 1 still loads.

The data file is written with O_DIRECT where the filesystem takes it and through the page
cache where not; both must give the same bytes, and a damaged or forged table is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from nodeprep.checkpoint import (
    CheckpointWriteError,
    commit_checkpoint,
    load_latest,
    rawfile,
    verify,
)
from nodeprep.checkpoint.manifest import FileEntry, Manifest
from nodeprep.checkpoint.rawfile import ALIGN, INLINE_MAX, DataFileWriter, split_payload


def _state() -> dict[str, Any]:
    torch.manual_seed(3)
    big = torch.randn(300, 301)
    return {
        "f32": torch.randn(70_001),  # not a multiple of 4096 bytes: a padded tail
        "bf16": torch.randn(50_000).to(torch.bfloat16),
        "i64": torch.arange(20_000, dtype=torch.int64),
        "bool": torch.rand(100_000) > 0.5,
        "c64": torch.randn(9_000, dtype=torch.complex64),
        "transposed": big.t(),  # not contiguous
        "unaligned": big.flatten()[1:],  # contiguous, data pointer not page-aligned
        "empty": torch.empty(0, 17),
        "scalar": torch.tensor(2.5),
        "small": torch.ones(3),
        "nested": [{"a": torch.randn(40_000)}, (torch.randn(20_000), 7, "text")],
        "plain": {"lr": 0.1, "name": "x"},
    }


def _assert_same(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        assert a.dtype == b.dtype
        assert a.shape == b.shape
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict)
        assert list(a) == list(b)
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b)
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    else:
        assert a == b


def _payloads(step: int) -> dict[str, Any]:
    return {"model.pt": _state(), "train.pt": {"step": step, "rng": torch.ones(5)}}


def test_every_dtype_and_layout_comes_back_exactly(tmp_path: Path) -> None:
    path = commit_checkpoint(tmp_path, 4, "full", _payloads(4))
    manifest = verify(path)
    assert manifest.format_version == 2
    assert sorted(manifest.files) == ["model.bin", "model.pt", "train.pt"]  # small: no train.bin
    loaded = load_latest(tmp_path)
    assert loaded is not None
    _assert_same(_payloads(4), loaded.payloads)
    table = torch.load(path / "model.pt", weights_only=True)["tensors"]
    assert all(offset % ALIGN == 0 for _, _, offset, _ in table)
    assert all(nbytes > INLINE_MAX for _, _, _, nbytes in table)
    assert (path / "model.bin").stat().st_size % ALIGN == 0


def _data_file(path: Path, direct: bool) -> tuple[bytes, int, str]:
    writer = DataFileWriter(path, direct=direct)
    split_payload(_state(), writer.append)
    size, digest = writer.finish()
    return path.read_bytes(), size, digest


def test_direct_and_buffered_writes_give_the_same_bytes_and_hash(tmp_path: Path) -> None:
    if not rawfile.direct_io_works(tmp_path):
        pytest.skip(f"O_DIRECT is refused on {tmp_path}'s filesystem")
    direct = _data_file(tmp_path / "direct.bin", direct=True)
    buffered = _data_file(tmp_path / "buffered.bin", direct=False)
    assert direct == buffered
    data, size, digest = direct
    assert size == len(data)
    assert digest == hashlib.sha256(data).hexdigest()


def test_the_probe_says_no_where_the_filesystem_refuses_o_direct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem without O_DIRECT (EINVAL at open, as on older tmpfs) gets buffered writes."""
    real_open = os.open

    def refusing(path: Any, flags: int, *args: Any) -> int:
        if flags & os.O_DIRECT:
            raise OSError(22, "Invalid argument")
        return real_open(path, flags, *args)

    monkeypatch.setattr(rawfile, "_direct_ok", {})
    monkeypatch.setattr(rawfile.os, "open", refusing)
    assert not rawfile.direct_io_works(tmp_path)
    writer = DataFileWriter(tmp_path / "x.bin")
    assert not writer.direct
    writer.append(torch.arange(100_000))
    _size, digest = writer.finish()
    assert digest == hashlib.sha256((tmp_path / "x.bin").read_bytes()).hexdigest()
    assert list(p.name for p in tmp_path.iterdir()) == ["x.bin"]  # no probe file left


def test_a_flipped_byte_in_a_data_file_falls_back_naming_the_file(tmp_path: Path) -> None:
    commit_checkpoint(tmp_path, 1, "full", _payloads(1))
    newest = commit_checkpoint(tmp_path, 2, "full", _payloads(2))
    with open(newest / "model.bin", "r+b") as handle:
        handle.seek(12345)
        byte = handle.read(1)
        handle.seek(12345)
        handle.write(bytes([byte[0] ^ 1]))
    loaded = load_latest(tmp_path)
    assert loaded is not None
    assert loaded.manifest.step == 1
    assert loaded.rejected == (
        (newest.name, f"{newest.name}: model.bin sha256 does not match manifest"),
    )


def _forge(path: Path, edit: Any) -> None:
    """Rewrite model.pt's table and the manifest to match: only the loader's checks remain."""
    meta = torch.load(path / "model.pt", weights_only=True)
    edit(meta)
    torch.save(meta, path / "model.pt")
    manifest = json.loads((path / "manifest.json").read_text())
    blob = (path / "model.pt").read_bytes()
    manifest["files"]["model.pt"] = {"size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda m: m["tensors"][0].__setitem__(2, 1 << 40), "outside the data file"),
        (lambda m: m["tensors"][0].__setitem__(2, 100), "outside the data file"),
        (lambda m: m["tensors"][0].__setitem__(3, 8), "bytes recorded, its shape needs"),
        (lambda m: m["tensors"][0].__setitem__(0, "Tensor"), "malformed table entry"),
        (lambda m: m["tensors"][1].__setitem__(2, m["tensors"][0][2]), "share bytes"),
        (lambda m: m["skeleton"].__setitem__("f32", {"__nodeprep_tensor__": 99}), "names no"),
        (lambda m: m.__setitem__("extra", 1), "not a format-2 payload"),
    ],
)
def test_a_forged_table_is_refused_before_any_byte_is_used(
    tmp_path: Path, edit: Any, reason: str
) -> None:
    commit_checkpoint(tmp_path, 1, "full", _payloads(1))
    newest = commit_checkpoint(tmp_path, 2, "full", _payloads(2))
    _forge(newest, edit)
    loaded = load_latest(tmp_path)
    assert loaded is not None
    assert loaded.manifest.step == 1
    ((name, why),) = loaded.rejected
    assert name == newest.name
    assert why.startswith(f"{newest.name}: model.pt: ")
    assert reason in why


def test_format_1_checkpoints_still_load(tmp_path: Path) -> None:
    """What earlier releases wrote: each payload one torch.save file, format_version 1."""
    path = tmp_path / "ckpt-0000000009-full"
    path.mkdir()
    files: dict[str, FileEntry] = {}
    for name, obj in _payloads(9).items():
        torch.save(obj, path / name)
        blob = (path / name).read_bytes()
        files[name] = FileEntry(size=len(blob), sha256=hashlib.sha256(blob).hexdigest())
    manifest = Manifest(step=9, layer="full", created=time.time(), files=files, format_version=1)
    (path / "manifest.json").write_text(manifest.to_json())
    loaded = load_latest(tmp_path)
    assert loaded is not None
    assert loaded.manifest.format_version == 1
    _assert_same(_payloads(9), loaded.payloads)


def test_a_state_using_the_reference_key_is_refused_in_one_sentence(tmp_path: Path) -> None:
    payloads = {"model.pt": {"__nodeprep_tensor__": 0}, "train.pt": {"step": 1}}
    with pytest.raises(CheckpointWriteError, match="may not use the key '__nodeprep_tensor__'"):
        commit_checkpoint(tmp_path, 1, "full", payloads)
    assert list(tmp_path.iterdir()) == []
