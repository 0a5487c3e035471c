"""Tensor bytes to disk at the disk's speed, and back: the data files of format version 2.

A payload (a state dict) is written as two files:

- ``<name>.pt``: its structure, saved with ``torch.save`` and loaded weights-only, with
  each large tensor replaced by ``{"__nodeprep_tensor__": i}`` and a table ``tensors``
  giving, for tensor ``i``, its dtype, shape, byte offset and byte count in the data file;
- ``<name>.bin``: the raw bytes of those tensors, each starting at a multiple of 4096
  (zeros in between), so every write is aligned.

Small tensors (RNG states, step counters) stay inside ``<name>.pt``: a data file per
payload would cost more than it saves. The data file is written with ``O_DIRECT`` where
the filesystem allows it (probed once per filesystem; tmpfs does not), straight from the
staging memory, in large chunks: no copy into the page cache, no serialisation. Where
``O_DIRECT`` is refused, or a tensor's memory is not page-aligned, the same bytes go
through an aligned bounce buffer or the page cache; either way the file is fsynced. The
sha256 of each 64 MiB piece is computed on a few threads from the same memory while the
writes proceed (hashlib releases the GIL), so hashing adds no time while it keeps up.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import itertools
import math
import mmap
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from nodeprep.checkpoint.manifest import PIECE, tree_sha256

ALIGN = 4096
CHUNK = 32 << 20  # bytes per write call: large enough to reach the disk's sequential rate
HASH_THREADS = 4  # at most; never more than the cores
INLINE_MAX = 64 << 10  # tensors up to this many bytes stay in the structure file
TENSOR_KEY = "__nodeprep_tensor__"
DATA_SUFFIX = ".bin"

_direct_ok: dict[int, bool] = {}  # st_dev -> whether O_DIRECT writes work there


class RawFormatError(ValueError):
    """A structure file or data file that does not describe a well-formed payload."""


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _byte_view(tensor: torch.Tensor, nbytes: int, writable: bool = False) -> memoryview:
    """The tensor's bytes in place (no copy). The caller keeps ``tensor`` alive while in use."""
    view = memoryview((ctypes.c_char * nbytes).from_address(tensor.data_ptr())).cast("B")
    return view if writable else view.toreadonly()


def direct_io_works(directory: Path) -> bool:
    """Whether ``O_DIRECT`` writes work on ``directory``'s filesystem (probed once per device)."""
    device = os.stat(directory).st_dev
    if device not in _direct_ok:
        probe = directory / f".direct-probe-{os.getpid()}-{threading.get_ident()}"
        works = False
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o600)
        except (OSError, AttributeError):
            fd = -1
        if fd >= 0:
            block = mmap.mmap(-1, ALIGN)
            try:
                works = os.pwrite(fd, block, 0) == ALIGN
            except OSError:
                works = False
            finally:
                os.close(fd)
                block.close()
        with contextlib.suppress(FileNotFoundError):
            probe.unlink()
        _direct_ok[device] = works
    return _direct_ok[device]


class _Hasher:
    """sha256 of each ``PIECE`` of the file, pieces hashed side by side on a few threads
    (hashlib releases the GIL) from views of memory that stays unchanged until ``digest``;
    the file's hash is over the pieces' digests (manifest.py). One thread hashes at about
    1.2 GB/s on the machines measured, slower than a fast disk: the pieces let spare cores
    keep up with it."""

    def __init__(self) -> None:
        self.piece = PIECE
        self.hashed = 0
        self._parts: list[memoryview | bytes] = []  # the piece being gathered
        self._filled = 0
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, min(HASH_THREADS, len(os.sched_getaffinity(0)))),
            thread_name_prefix="nodeprep-ckpt-hash",
        )
        self._digests: list[Future[bytes]] = []

    def feed(self, block: memoryview | bytes) -> None:
        view = memoryview(block)
        self.hashed += view.nbytes
        while view.nbytes > 0:
            take = min(view.nbytes, self.piece - self._filled)
            self._parts.append(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == self.piece:
                self._submit()

    def _submit(self) -> None:
        self._digests.append(self._pool.submit(_sha256_of, self._parts))
        self._parts, self._filled = [], 0

    def digest(self, expected_bytes: int) -> str:
        """The file's hash once every piece is hashed; raises if hashing failed or fell short
        of ``expected_bytes``."""
        if self._filled:
            self._submit()
        try:
            digests = [future.result() for future in self._digests]
        except Exception as exc:  # a partial hash must never pass
            raise OSError(f"hashing the data file failed: {exc}") from exc
        finally:
            self._pool.shutdown(wait=True)
        if self.hashed != expected_bytes:
            raise OSError(f"hashed {self.hashed} bytes of a {expected_bytes}-byte data file")
        return tree_sha256(digests)

    def abandon(self) -> None:
        """Stop: pieces not started are dropped, those running end before this returns."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def _sha256_of(parts: list[memoryview | bytes]) -> bytes:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.digest()


class DataFileWriter:
    """Appends tensors to one data file at aligned offsets; ``finish`` fsyncs and hashes."""

    def __init__(self, path: Path, direct: bool | None = None) -> None:
        self.path = path
        self.direct = direct_io_works(path.parent) if direct is None else direct
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | (os.O_DIRECT if self.direct else 0)
        self._fd = os.open(path, flags, 0o644)
        self._offset = 0
        self._bounce: mmap.mmap | None = None
        self._hasher = _Hasher()
        self._keep: list[torch.Tensor] = []  # tensors whose memory the hasher may still read

    def append(self, tensor: torch.Tensor) -> tuple[int, int]:
        """Write ``tensor``'s bytes at the next aligned offset; returns (offset, nbytes)."""
        if tensor.layout != torch.strided:
            raise ValueError(f"a {tensor.layout} tensor cannot be checkpointed; make it dense")
        # Lazy conjugate/negative views would be written as their unresolved bytes.
        tensor = tensor.detach().resolve_conj().resolve_neg()
        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            tensor = tensor.to("cpu", copy=False).contiguous()
        nbytes = tensor.numel() * tensor.element_size()
        offset = self._offset
        if nbytes:
            self._keep.append(tensor)
            self._write(_byte_view(tensor, nbytes), tensor.data_ptr() % ALIGN == 0)
        return offset, nbytes

    def _write(self, data: memoryview, aligned_source: bool) -> None:
        total = len(data)
        whole = total - total % ALIGN
        position = 0
        while position < whole:
            chunk = data[position : min(position + CHUNK, whole)]
            self._hasher.feed(chunk)
            if self.direct and not aligned_source:
                self._through_bounce(chunk)
            else:
                self._pwrite(chunk)
            position += len(chunk)
        tail = total - whole
        if tail:
            padded = bytes(data[whole:]) + bytes(ALIGN - tail)
            self._hasher.feed(padded)
            self._through_bounce(memoryview(padded))

    def _through_bounce(self, chunk: memoryview) -> None:
        """Write via page-aligned memory (``O_DIRECT`` needs an aligned source)."""
        if self._bounce is None:
            self._bounce = mmap.mmap(-1, CHUNK)
        self._bounce[: len(chunk)] = chunk
        self._pwrite(memoryview(self._bounce)[: len(chunk)])

    def _pwrite(self, chunk: memoryview) -> None:
        done = 0
        while done < len(chunk):
            try:
                written = os.pwrite(self._fd, chunk[done:], self._offset + done)
            except OSError as exc:
                if exc.errno != errno.EINVAL or not self.direct:
                    raise
                self._buffered()  # the probe passed, this write did not: the page cache then
                continue
            if written <= 0:
                raise OSError(f"short write to {self.path}")
            done += written
        self._offset += len(chunk)

    def _buffered(self) -> None:
        """Go on without O_DIRECT on the same file (already written bytes stay)."""
        fd = os.open(self.path, os.O_WRONLY)
        old, self._fd, self.direct = self._fd, fd, False
        with contextlib.suppress(OSError):  # released by the kernel even when close fails
            os.close(old)

    def finish(self) -> tuple[int, str, int]:
        """fsync and close; returns the size, the sha256 over its pieces (manifest.py) and
        the piece size, of the file as written."""
        fd, self._fd = self._fd, -1
        try:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            digest = self._hasher.digest(self._offset)
        except BaseException:
            self._hasher.abandon()
            raise
        finally:
            self._release()  # the hasher has stopped reading: the tensors may go
        return self._offset, digest, self._hasher.piece

    def abort(self) -> None:
        """Close without fsync (the caller removes the file); never raises."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._hasher.abandon()
        self._release()

    def _release(self) -> None:
        self._keep.clear()
        self._bounce = None  # unmapped when the last view of it (a traceback's) is gone


def split_payload(obj: Any, append: Callable[[torch.Tensor], tuple[int, int]]) -> Any:
    """The structure of ``obj`` with each large tensor written through ``append`` and replaced
    by a reference; returns ``{"skeleton": ..., "tensors": [[dtype, shape, offset, nbytes]]}``."""
    table: list[list[Any]] = []

    def leaf(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if value.numel() * value.element_size() <= INLINE_MAX:
                return value
            offset, nbytes = append(value)
            dtype = str(value.dtype).removeprefix("torch.")
            table.append([dtype, list(value.shape), offset, nbytes])
            return {TENSOR_KEY: len(table) - 1}
        if isinstance(value, dict) and TENSOR_KEY in value:
            raise ValueError(f"a state dict may not use the key {TENSOR_KEY!r}")
        return _DESCEND

    return {"skeleton": _rebuild(obj, leaf), "tensors": table}


_DESCEND = object()


def _rebuild(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """A copy of dicts, lists and tuples, with ``leaf(x)`` in place of each value it claims
    (anything but ``_DESCEND``)."""
    replaced = leaf(value)
    if replaced is not _DESCEND:
        return replaced
    if isinstance(value, dict):
        return {key: _rebuild(item, leaf) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_rebuild(item, leaf) for item in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def join_payload(meta: Any, data_path: Path | None, data_size: int) -> Any:
    """Rebuild a payload from its structure file's contents and its data file.

    Every table entry is checked against the file (dtype known, byte count equal to the
    shape's, aligned, inside the file, no overlap) before anything is read; a violation
    raises RawFormatError naming the entry.
    """
    if not isinstance(meta, dict) or set(meta) != {"skeleton", "tensors"}:
        raise RawFormatError("the structure file is not a format-2 payload")
    table = meta["tensors"]
    if not isinstance(table, list) or (table and data_path is None):
        raise RawFormatError("the tensor table is malformed or its data file is missing")
    checked = [_check_entry(i, entry, data_size) for i, entry in enumerate(table)]
    _check_no_overlap(table)  # every entry proven before any memory is allocated
    tensors = [torch.empty(shape, dtype=dtype) for dtype, shape in checked]
    if data_path is not None:
        with open(data_path, "rb", buffering=0) as handle:
            for index, (tensor, entry) in enumerate(zip(tensors, table, strict=True)):
                _read_into(handle.fileno(), tensor, int(entry[2]), index)

    def leaf(value: Any) -> Any:
        if not isinstance(value, dict) or TENSOR_KEY not in value:
            return _DESCEND
        index = value[TENSOR_KEY]
        if len(value) != 1 or not isinstance(index, int) or not 0 <= index < len(tensors):
            raise RawFormatError(f"a tensor reference {value!r} names no table entry")
        return tensors[index]

    return _rebuild(meta["skeleton"], leaf)


def _check_entry(index: int, entry: Any, data_size: int) -> tuple[torch.dtype, list[int]]:
    """(dtype, shape) of one table entry, once it is proven consistent with the data file."""
    try:
        dtype_name, shape, offset, nbytes = entry
        dtype = getattr(torch, str(dtype_name))
        shape = [int(n) for n in shape]
    except (TypeError, ValueError, AttributeError) as exc:
        raise RawFormatError(f"tensor {index}: malformed table entry {entry!r}") from exc
    if not isinstance(dtype, torch.dtype) or any(n < 0 for n in shape):
        raise RawFormatError(f"tensor {index}: malformed table entry {entry!r}")
    expected = math.prod(shape) * dtype.itemsize
    if not isinstance(offset, int) or not isinstance(nbytes, int) or nbytes != expected:
        raise RawFormatError(f"tensor {index}: {nbytes} bytes recorded, its shape needs {expected}")
    if offset % ALIGN or offset < 0 or offset + nbytes > data_size:
        raise RawFormatError(f"tensor {index}: bytes {offset}+{nbytes} outside the data file")
    return dtype, shape


def _read_into(fd: int, tensor: torch.Tensor, offset: int, index: int) -> None:
    nbytes = tensor.numel() * tensor.element_size()
    if not nbytes:
        return
    view = _byte_view(tensor, nbytes, writable=True)
    got = 0
    while got < nbytes:
        n = os.preadv(fd, [view[got:]], offset + got)
        if n <= 0:
            raise RawFormatError(f"tensor {index}: the data file ended early")
        got += n


def _check_no_overlap(table: list[Any]) -> None:
    spans = sorted((int(e[2]), int(e[2]) + int(e[3])) for e in table if int(e[3]))
    for (_, end), (start, _) in itertools.pairwise(spans):
        if start < end:
            raise RawFormatError("two tensors of the table share bytes of the data file")
