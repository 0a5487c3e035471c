"""Staging data sets onto a node: what the inventory asks for, what is missing, and whether it fits.

The ``dataset`` role's modules and the controller's check of role variables share this file,
so a wrong ``datasets`` entry is refused with the same sentence before any node is reached
(exit 2) as on the node. A data set is a directory of its own (``dest``) holding exactly the
files listed, each proven by its sha256, and ``dataset-manifest.json`` written last.

Standard library and Python 3.8 only: this runs on the nodes as Ansible module_utils.
"""

from __future__ import annotations

import os
import posixpath
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import DownloadError
from .fetch import check_url, open_get, parse_content_range
from .files import hash_file
from .manifest import MANIFEST_NAME, DatasetManifest, ManifestEntry, ManifestError, read_manifest

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
_CONTROL = re.compile(r"[\x00-\x1f]")
PART_SUFFIXES = (".part", ".part.json")
FILE_KEYS = {"url", "src", "sha256", "size", "path"}
DATASET_KEYS = {"name", "dest", "files"}


class StagingError(Exception):
    """A data set cannot be staged as asked; the message names the data set, file and fix."""


@dataclass(frozen=True)
class StagedFile:
    """One file of a data set: where it lands (relative to dest) and where it comes from."""

    path: str
    sha256: str
    size: int | None
    url: str | None
    src: str | None


@dataclass(frozen=True)
class Dataset:
    name: str
    dest: str
    files: tuple[StagedFile, ...]


DEFAULT_ROOTS = ("/data", "/mnt", "/srv", "/scratch", "/opt", "/home", "/var/lib")


def parse_datasets(value: Any, allowed_roots: Any = DEFAULT_ROOTS) -> list[Dataset]:
    """The data sets of the role variable ``datasets``, or StagingError naming the first fault.

    Every ``dest`` must lie inside one of ALLOWED_ROOTS (the role's ``dataset_allowed_roots``),
    so that a typo cannot stage a data set over /etc or /usr; None leaves that to the node
    (the controller judges ``datasets`` alone, without the host's roots)."""
    if not isinstance(value, list):
        raise StagingError(f"datasets must be a list of data sets, not {type(value).__name__}")
    roots = None if allowed_roots is None else _roots(allowed_roots)
    found: list[Dataset] = []
    for index, item in enumerate(value):
        dataset = _dataset(index, item)
        if roots is not None and not any(
            dataset.dest.startswith(root.rstrip("/") + "/") for root in roots
        ):
            raise StagingError(
                f"data set {dataset.name!r}: dest {dataset.dest} is outside the allowed roots "
                f"({', '.join(roots)}); choose a dest inside one, or add its root to "
                "dataset_allowed_roots"
            )
        for other in found:
            if other.name == dataset.name:
                raise StagingError(f"data set {dataset.name!r} is listed twice; give each a name")
            if _nested(other.dest, dataset.dest):
                raise StagingError(
                    f"data sets {other.name!r} ({other.dest}) and {dataset.name!r} "
                    f"({dataset.dest}) share a directory; give each its own dest"
                )
        found.append(dataset)
    return found


def check_roots(value: Any) -> None:
    """StagingError when the role variable ``dataset_allowed_roots`` is not a list of roots."""
    _roots(value)


def _roots(value: Any) -> list[str]:
    if not isinstance(value, (list, tuple)) or not value:
        raise StagingError(f"dataset_allowed_roots must be a non-empty list, not {value!r}")
    for root in value:
        if (
            not isinstance(root, str)
            or not root.startswith("/")
            or posixpath.normpath(root) != root.rstrip("/")
        ):
            raise StagingError(
                f"dataset_allowed_roots holds {root!r}; each must be an absolute, normalised path"
            )
    return [str(root) for root in value]


def _nested(one: str, two: str) -> bool:
    return one == two or one.startswith(two.rstrip("/") + "/") or two.startswith(one + "/")


def _dataset(index: int, item: Any) -> Dataset:
    if not isinstance(item, dict):
        raise StagingError(f"datasets[{index}] must be a mapping with name, dest and files")
    unknown = sorted(set(item) - DATASET_KEYS)
    name = item.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise StagingError(
            f"datasets[{index}].name must be 1-64 letters, digits, '.', '_' or '-', not {name!r}"
        )
    if unknown:
        raise StagingError(f"data set {name!r} has unknown keys {unknown}; use name, dest, files")
    dest = item.get("dest")
    if (
        not isinstance(dest, str)
        or not dest.startswith("/")
        or posixpath.normpath(dest) != dest.rstrip("/")
        or dest.rstrip("/") in ("", "/")
        or _CONTROL.search(dest)
    ):
        raise StagingError(
            f"data set {name!r}: dest must be an absolute, normalised directory other than /, "
            f"not {dest!r}"
        )
    files = item.get("files")
    if not isinstance(files, list) or not files:
        raise StagingError(f"data set {name!r}: files must be a non-empty list")
    staged = [_file(name, number, entry) for number, entry in enumerate(files)]
    seen: dict[str, int] = {}
    for number, staged_file in enumerate(staged):
        if staged_file.path in seen:
            raise StagingError(
                f"data set {name!r}: files[{seen[staged_file.path]}] and files[{number}] both "
                f"land at {staged_file.path}; set path on one of them"
            )
        seen[staged_file.path] = number
    return Dataset(name, dest.rstrip("/"), tuple(staged))


def _file(name: str, number: int, entry: Any) -> StagedFile:
    where = f"data set {name!r} files[{number}]"
    if not isinstance(entry, dict):
        raise StagingError(f"{where} must be a mapping with url or src, and sha256")
    unknown = sorted(set(entry) - FILE_KEYS)
    if unknown:
        raise StagingError(
            f"{where} has unknown keys {unknown}; use url or src, sha256, size, path"
        )
    url, src = entry.get("url"), entry.get("src")
    if (url is None) == (src is None):
        raise StagingError(f"{where} needs exactly one of url (to download) or src (to copy)")
    if url is not None:
        if not isinstance(url, str):
            raise StagingError(f"{where}: url must be a string, not {url!r}")
        try:
            parts = check_url(url)
        except DownloadError as exc:
            raise StagingError(f"{where}: {exc}") from None
        default = posixpath.basename(urllib.parse.unquote(parts.path))
    else:
        if not isinstance(src, str) or not src.startswith("/") or src.endswith("/"):
            raise StagingError(
                f"{where}: src must be the absolute path of a file on the controller, not {src!r}"
            )
        default = posixpath.basename(src.rstrip("/"))
    sha256 = entry.get("sha256")
    if not isinstance(sha256, str) or not _SHA256.match(sha256):
        raise StagingError(f"{where}: sha256 must be 64 hexadecimal digits, not {sha256!r}")
    size = entry.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise StagingError(f"{where}: size must be a whole number of bytes, not {size!r}")
    path = entry.get("path", default)
    if not isinstance(path, str) or not _safe_relative(path):
        raise StagingError(
            f"{where}: path must be a plain relative path inside dest (set path:), not {path!r}"
        )
    return StagedFile(path, sha256.lower(), size, url, src)


def _safe_relative(path: str) -> bool:
    parts = path.split("/")
    return (
        bool(path)
        and not _CONTROL.search(path)
        and all(part not in ("", ".", "..") for part in parts)
        and path != MANIFEST_NAME
        and not path.endswith(PART_SUFFIXES)
    )


def recorded(dataset: Dataset) -> DatasetManifest | None:
    """The manifest a previous staging left in dest, when it is there and trustworthy."""
    if not os.path.exists(os.path.join(dataset.dest, MANIFEST_NAME)):
        return None
    try:
        return read_manifest(dataset.dest)
    except ManifestError:
        return None  # rebuilt after staging; every file is then proven by its hash


def is_good(dataset: Dataset, wanted: StagedFile, manifest: DatasetManifest | None) -> bool:
    """True when dest already holds WANTED: the manifest vouches for it and its size still
    matches (no read), or its bytes hash to the expected sha256."""
    path = os.path.join(dataset.dest, wanted.path)
    if not os.path.isfile(path) or os.path.islink(path):
        return False
    size = os.stat(path).st_size
    if wanted.size is not None and size != wanted.size:
        return False
    listed = {entry.path: entry for entry in (manifest.files if manifest else ())}
    entry = listed.get(wanted.path)
    if entry is not None and entry.sha256 == wanted.sha256 and entry.size == size:
        return True
    return hash_file(Path(path))[1] == wanted.sha256


def extras(dataset: Dataset) -> list[str]:
    """Files in dest that the data set does not list (its manifest and parts excepted)."""
    if not os.path.isdir(dataset.dest):
        return []
    listed = {staged.path for staged in dataset.files}
    allowed = listed | {p + suffix for p in listed for suffix in PART_SUFFIXES}
    found = []
    for directory, subdirs, names in os.walk(dataset.dest):
        subdirs.sort()
        for file_name in sorted(names):
            relative = os.path.relpath(os.path.join(directory, file_name), dataset.dest)
            relative = relative.replace(os.sep, "/")
            if relative == MANIFEST_NAME or relative.startswith(f".{MANIFEST_NAME}.tmp-"):
                continue
            if relative not in allowed:
                found.append(relative)
    return found


def remote_size(url: str, timeout: float) -> int | None:
    """The size the server reports for URL (one ranged GET of one byte), or None if it won't say."""
    try:
        exchange = open_get(url, {"Range": "bytes=0-0"}, timeout)
    except (DownloadError, OSError):
        return None
    try:
        response = exchange.response
        if response.status == 206:
            served = parse_content_range(response.getheader("Content-Range"))
            return served.total if served is not None else None
        if response.status == 200:
            length = response.getheader("Content-Length")
            return int(length) if length and length.isdigit() else None
        return None
    except Exception:  # a broken reply is an unknown size, not a failed plan
        return None
    finally:
        exchange.close()


def part_bytes(dataset: Dataset, staged: StagedFile) -> int:
    """Bytes of STAGED already in its .part (they count as written)."""
    try:
        return os.stat(os.path.join(dataset.dest, staged.path + ".part")).st_size
    except OSError:
        return 0


def free_bytes(path: str) -> tuple[str, int]:
    """The nearest existing directory at or above PATH, and the bytes free to unprivileged use."""
    probe = path
    while not os.path.isdir(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    stats = os.statvfs(probe)
    return probe, stats.f_bavail * stats.f_frsize


def human(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"  # pragma: no cover - the loop returns


def manifest_of(dataset: Dataset) -> DatasetManifest:
    """The manifest of the staged files (sizes read from dest; every hash was proven)."""
    return DatasetManifest(
        tuple(
            ManifestEntry(
                staged.path,
                os.stat(os.path.join(dataset.dest, staged.path)).st_size,
                staged.sha256,
            )
            for staged in dataset.files
        )
    )
