"""Format version 2: large tensors as raw aligned bytes, loaded back exactly; version 1 still loads.

The data file is written with O_DIRECT where the filesystem takes it and through the page
cache where not; both must give the same bytes, and a damaged or forged table is refused.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from nodeprep.checkpoint import (
    CheckpointInvalidError,
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


def _pieces_hash(data: bytes, piece: int) -> str:
    """What the manifest's sha256 of a chunked file is, computed the plain way."""
    digests = [hashlib.sha256(data[i : i + piece]).digest() for i in range(0, len(data), piece)]
    return hashlib.sha256(b"".join(digests)).hexdigest()


def _data_file(path: Path, direct: bool) -> tuple[bytes, int, str]:
    writer = DataFileWriter(path, direct=direct)
    split_payload(_state(), writer.append)
    size, digest, piece = writer.finish()
    assert piece == rawfile.PIECE
    return path.read_bytes(), size, digest


@pytest.fixture
def direct_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory where O_DIRECT works: the test's own, else one under /var/tmp (on disk
    where /tmp is a tmpfs without O_DIRECT, as on kernels before 6.6)."""
    if rawfile.direct_io_works(tmp_path):
        yield tmp_path
        return
    other = Path(tempfile.mkdtemp(prefix="nodeprep-direct-", dir="/var/tmp"))
    try:
        if not rawfile.direct_io_works(other):
            pytest.fail(f"O_DIRECT works neither on {tmp_path} nor on {other}")
        yield other
    finally:
        shutil.rmtree(other)


def test_direct_and_buffered_writes_give_the_same_bytes_and_hash(direct_dir: Path) -> None:
    direct = _data_file(direct_dir / "direct.bin", direct=True)
    buffered = _data_file(direct_dir / "buffered.bin", direct=False)
    assert direct == buffered
    data, size, digest = direct
    assert size == len(data)
    assert digest == _pieces_hash(data, rawfile.PIECE)


def _refusing_direct(monkeypatch: pytest.MonkeyPatch, at: str) -> list[int]:
    """O_DIRECT refused with EINVAL at open or at the first write, as filesystems do."""
    real_open, real_pwrite = os.open, os.pwrite
    direct_fds: list[int] = []

    def fake_open(path: Any, flags: int, *args: Any) -> int:
        if flags & os.O_DIRECT and at == "open":
            raise OSError(errno.EINVAL, "Invalid argument")
        fd = real_open(path, flags, *args)
        if flags & os.O_DIRECT:
            direct_fds.append(fd)
        return fd

    def fake_pwrite(fd: int, data: Any, offset: int) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(rawfile, "_direct_ok", {})
    monkeypatch.setattr(rawfile.os, "open", fake_open)
    monkeypatch.setattr(rawfile.os, "pwrite", fake_pwrite)
    return direct_fds


@pytest.mark.parametrize("at", ["open", "write"])
def test_the_probe_says_no_where_the_filesystem_refuses_o_direct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: str
) -> None:
    _refusing_direct(monkeypatch, at)
    assert not rawfile.direct_io_works(tmp_path)
    assert list(tmp_path.iterdir()) == []  # the probe file, where one was made, is gone
    writer = DataFileWriter(tmp_path / "x.bin")
    assert not writer.direct
    writer.append(torch.arange(100_000))
    _size, digest, piece = writer.finish()
    assert digest == _pieces_hash((tmp_path / "x.bin").read_bytes(), piece)


def test_a_write_refused_after_the_probe_goes_on_through_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    direct_fds = _refusing_direct(monkeypatch, "write")
    writer = DataFileWriter(tmp_path / "x.bin", direct=True)
    assert direct_fds  # opened with O_DIRECT
    writer.append(torch.arange(100_000))
    assert not writer.direct
    size, digest, piece = writer.finish()
    data = (tmp_path / "x.bin").read_bytes()
    assert size == len(data)
    written = torch.frombuffer(bytearray(data[:800_000]), dtype=torch.int64)
    assert torch.equal(written, torch.arange(100_000))
    assert digest == _pieces_hash(data, piece)


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


def test_pieces_are_hashed_apart_and_a_flip_in_any_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1 MiB pieces (the smallest a manifest may claim) over a 5 MB tensor: several pieces,
    hashed side by side on verify; a flipped byte in the fourth is found."""
    monkeypatch.setattr(rawfile, "PIECE", 1 << 20)
    payloads = {"model.pt": {"w": torch.randn(1_250_000)}, "train.pt": {"step": 1}}
    path = commit_checkpoint(tmp_path, 1, "full", payloads)
    entry = verify(path).files["model.bin"]
    assert entry.chunk == 1 << 20
    assert entry.size > 4 * entry.chunk
    assert entry.sha256 == _pieces_hash((path / "model.bin").read_bytes(), 1 << 20)
    with open(path / "model.bin", "r+b") as handle:
        handle.seek(3 * entry.chunk + 77)
        byte = handle.read(1)
        handle.seek(3 * entry.chunk + 77)
        handle.write(bytes([byte[0] ^ 0x80]))
    with pytest.raises(CheckpointInvalidError, match=r"model\.bin sha256 does not match manifest"):
        verify(path)


def test_a_manifest_claiming_tiny_pieces_is_refused(tmp_path: Path) -> None:
    path = commit_checkpoint(tmp_path, 1, "full", _payloads(1))
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["model.bin"]["chunk"] = 1
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointInvalidError, match=r"model\.bin has pieces of 1 bytes"):
        verify(path)


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
