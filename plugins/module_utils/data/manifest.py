"""Data set manifests: every file under a directory with its size and sha256, and one version.

A training run should be able to say exactly which data it saw, and a node
should be able to prove that its staged copy is that data. A manifest lists
every regular file under a root; its ``version`` is one hash over that list,
so two directories with the same version hold the same bytes under the same
names, whatever order they were written in.

Canonical form of ``version`` (so another implementation can reproduce it):

1. Take every regular file under the root, recursively, except the manifest
   itself (``dataset-manifest.json`` at the top) and its temporary siblings
   (``.dataset-manifest.json.tmp-*`` at the top). Symbolic links and special
   files are refused, never followed.
2. Its path is relative to the root, components joined by ``/``, with no
   leading ``./``, encoded as UTF-8. Paths with control characters (below
   U+0020, tab and newline included) or that are not valid UTF-8 are refused.
3. One line per file: ``PATH`` TAB ``SIZE`` TAB ``SHA256`` LF, where SIZE is the
   size in bytes in decimal without leading zeros and SHA256 is 64 lowercase
   hex digits.
4. Sort the lines bytewise (which is the same as sorting by the UTF-8 bytes of
   the path, since no path holds a byte below TAB), concatenate them, and take
   the lowercase hex sha256 of the result. An empty data set has the version
   of the empty string, ``e3b0c442...b855``.

In shell, for a tree without odd names: ``find . -type f ! -path ./dataset-manifest.json
-printf '%P\\t%s\\t' -exec sh -c 'sha256sum < "$1" | cut -c1-64' _ {} \\; | LC_ALL=C sort |
sha256sum``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .files import atomic_write_text, hash_file

MANIFEST_NAME = "dataset-manifest.json"
FORMAT = "nodeprep.dataset-manifest"
FORMAT_VERSION = 1
_TEMP_PREFIX = f".{MANIFEST_NAME}.tmp-"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CONTROL = re.compile(r"[\x00-\x1f]")


class ManifestError(Exception):
    """A manifest cannot be built, read or trusted; the message names the path and the reason."""


@dataclass(frozen=True)
class ManifestEntry:
    """One file of a data set: path relative to the root (``/``-separated), size, sha256."""

    path: str
    size: int
    sha256: str

    def line(self) -> str:
        """This file's line of the canonical form (see the module docstring)."""
        return f"{self.path}\t{self.size}\t{self.sha256}\n"


@dataclass(frozen=True)
class DatasetManifest:
    """Every file of a data set, sorted by path, and the version that sums them up."""

    files: tuple[ManifestEntry, ...]

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.files, key=lambda entry: entry.path.encode("utf-8")))
        for earlier, later in zip(ordered, ordered[1:]):  # itertools.pairwise: 3.10+
            if earlier.path == later.path:
                raise ManifestError(f"the manifest lists {earlier.path} twice")
        object.__setattr__(self, "files", ordered)

    @property
    def version(self) -> str:
        """sha256 of the canonical form: the sorted ``PATH\\tSIZE\\tSHA256\\n`` lines."""
        digest = hashlib.sha256()
        for entry in self.files:
            digest.update(entry.line().encode("utf-8"))
        return digest.hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files)

    def to_json(self) -> str:
        body = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "version": self.version,
            "files": [{"path": e.path, "size": e.size, "sha256": e.sha256} for e in self.files],
        }
        return json.dumps(body, indent=1, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> DatasetManifest:
        """Parse and validate; the stored version must match the files, or it was edited."""
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise ManifestError(f"the manifest is not valid JSON: {exc}") from exc
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise ManifestError(f"this is not a {FORMAT} document")
        if body.get("format_version") != FORMAT_VERSION or not isinstance(body.get("files"), list):
            raise ManifestError(f"unsupported manifest format_version {body.get('format_version')}")
        manifest = cls(tuple(_entry_from_json(item) for item in body["files"]))
        if body.get("version") != manifest.version:
            raise ManifestError(
                f"the manifest says version {body.get('version')} but its files sum to "
                f"{manifest.version}; it was edited or damaged, build it again"
            )
        return manifest


def _entry_from_json(item: Any) -> ManifestEntry:
    if not isinstance(item, dict):
        raise ManifestError(f"a manifest entry must be an object, not {item!r}")
    path, size, sha256 = item.get("path"), item.get("size"), item.get("sha256")
    if not isinstance(path, str) or not _is_safe_relative(path):
        raise ManifestError(f"the manifest path {path!r} is not a plain relative path")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ManifestError(f"the manifest size of {path} must be a non-negative integer")
    if not isinstance(sha256, str) or _SHA256.fullmatch(sha256) is None:
        raise ManifestError(f"the manifest sha256 of {path} must be 64 lowercase hex digits")
    return ManifestEntry(path, size, sha256)


def _is_safe_relative(path: str) -> bool:
    """No absolute paths, no ``..`` and no empty or ``.`` parts: a check never leaves the root."""
    parts = path.split("/")
    return not _CONTROL.search(path) and all(part not in ("", ".", "..") for part in parts)


def walk(root: Path) -> Iterator[tuple[str, Path, str]]:
    """(relative path, path, kind) of everything under ``root`` but the manifest's own files.

    ``kind`` is ``file``, ``symlink`` or ``special``; symbolic links are
    reported, never followed, so a data set can never reach outside its root.
    """
    yield from _walk(root, "")


def _walk(directory: Path, prefix: str) -> Iterator[tuple[str, Path, str]]:
    with os.scandir(directory) as entries:
        ordered = sorted(entries, key=lambda entry: entry.name)
    for entry in ordered:
        if not prefix and (entry.name == MANIFEST_NAME or entry.name.startswith(_TEMP_PREFIX)):
            continue
        relative = f"{prefix}{entry.name}"
        if entry.is_symlink():
            yield relative, Path(entry.path), "symlink"
        elif entry.is_dir(follow_symlinks=False):
            yield from _walk(Path(entry.path), f"{relative}/")
        elif entry.is_file(follow_symlinks=False):
            yield relative, Path(entry.path), "file"
        else:
            yield relative, Path(entry.path), "special"


def build_manifest(root: str | os.PathLike[str]) -> DatasetManifest:
    """Hash every file under ``root`` once; refuses symlinks, special files and odd names."""
    base = Path(root)
    if not base.is_dir():
        raise ManifestError(f"{base} is not a directory; a manifest describes a directory")
    entries = []
    for relative, path, kind in walk(base):
        if kind != "file":
            raise ManifestError(
                f"{path} is a {'symbolic link' if kind == 'symlink' else 'special file'}; "
                "a data set holds regular files only: replace it with a copy of the file"
            )
        _check_name(relative, path)
        size, sha256 = hash_file(path)
        entries.append(ManifestEntry(relative, size, sha256))
    return DatasetManifest(tuple(entries))


def _check_name(relative: str, path: Path) -> None:
    """Refuse names the canonical form cannot carry (see the module docstring, step 2)."""
    try:
        relative.encode("utf-8")
    except UnicodeEncodeError:
        raise ManifestError(f"{path!r} is not a UTF-8 file name; rename it") from None
    if _CONTROL.search(relative):
        raise ManifestError(f"{path!r} has a control character in its name; rename it")


def write_manifest(root: str | os.PathLike[str], manifest: DatasetManifest) -> Path:
    """Write ``root/dataset-manifest.json`` atomically and durably; returns its path."""
    path = Path(root) / MANIFEST_NAME
    atomic_write_text(path, manifest.to_json())
    return path


def read_manifest(root: str | os.PathLike[str]) -> DatasetManifest:
    """The manifest stored in ``root``, validated (see ``DatasetManifest.from_json``)."""
    path = Path(root) / MANIFEST_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"cannot read the manifest {path}: {exc.strerror}") from exc
    try:
        return DatasetManifest.from_json(text)
    except ManifestError as exc:
        raise ManifestError(f"{path}: {exc}") from exc


@dataclass(frozen=True)
class Problem:
    """One way a directory differs from its manifest.

    ``kind`` is ``missing``, ``size``, ``sha256``, ``not_a_file`` or ``extra``;
    ``detail`` is the sentence to show a person.
    """

    path: str
    kind: str
    detail: str

    def __str__(self) -> str:
        return self.detail


def check(root: str | os.PathLike[str], manifest: DatasetManifest, full: bool) -> list[Problem]:
    """Every difference between ``root`` and ``manifest``, in path order (empty: they agree).

    The cheap mode (``full=False``) compares names and sizes from one
    directory walk, which catches a missing, truncated or extra file in
    seconds on any data set; ``full=True`` also re-reads and hashes every
    file whose size matches, which catches bit rot and same-size edits.
    """
    base = Path(root)
    if not base.is_dir():
        raise ManifestError(f"{base} is not a directory; nothing to check against the manifest")
    found = {relative: (path, kind) for relative, path, kind in walk(base)}
    problems = []
    for entry in manifest.files:
        path, kind = found.pop(entry.path, (None, "missing"))
        problem = _compare(entry, path, kind, full)
        if problem is not None:
            problems.append(problem)
    problems += [
        Problem(relative, "extra", f"{relative}: unexpected extra file (not in the manifest)")
        for relative in sorted(found, key=lambda name: name.encode("utf-8", "surrogateescape"))
    ]
    return problems


def _compare(entry: ManifestEntry, path: Path | None, kind: str, full: bool) -> Problem | None:
    name = entry.path
    if path is None:
        return Problem(name, "missing", f"{name}: missing (the manifest lists {entry.size} bytes)")
    if kind != "file":
        return Problem(name, "not_a_file", f"{name}: is a {kind}, not a regular file")
    size = path.stat().st_size
    if size != entry.size:
        detail = f"{name}: size {size} != {entry.size} (on disk != manifest)"
        return Problem(name, "size", detail)
    if full:
        _, sha256 = hash_file(path)
        if sha256 != entry.sha256:
            detail = f"{name}: sha256 differs (on disk {sha256}, manifest {entry.sha256})"
            return Problem(name, "sha256", detail)
    return None
