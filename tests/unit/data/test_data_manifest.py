"""Data set manifests: a version that is stable and canonical, checks that name each difference."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nodeprep.data import (
    MANIFEST_NAME,
    DatasetManifest,
    ManifestError,
    build_manifest,
    check,
    read_manifest,
    write_manifest,
)

FILES = {
    "train/shard-000.bin": b"\x00\x01" * 1000,
    "train/shard-001.bin": b"second shard",
    "val/shard-000.bin": b"",
    "README": "über\n".encode(),
}
# Computed with the shell recipe (not this code); a change here breaks every recorded version.
KNOWN_VERSION = "b3a34f5115d45a1b57e042cabeb8941f6101a284c060b9b3c6178b77afbd21cb"


def _make(root: Path, names: list[str]) -> Path:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(FILES[name])
    return root


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return _make(tmp_path / "ds", sorted(FILES))


def test_version_is_the_documented_canonical_hash(dataset: Path) -> None:
    lines = sorted(
        f"{name}\t{len(data)}\t{hashlib.sha256(data).hexdigest()}\n".encode()
        for name, data in FILES.items()
    )

    version = build_manifest(dataset).version

    assert version == hashlib.sha256(b"".join(lines)).hexdigest() == KNOWN_VERSION


@pytest.mark.skipif(shutil.which("find") is None, reason="needs GNU find and sha256sum")
def test_the_shell_recipe_in_the_docstring_gives_the_same_version(dataset: Path) -> None:
    recipe = (
        "find . -type f ! -path ./dataset-manifest.json -printf '%P\\t%s\\t' "
        "-exec sh -c 'sha256sum < \"$1\" | cut -c1-64' _ {} \\; | LC_ALL=C sort | sha256sum"
    )
    write_manifest(dataset, build_manifest(dataset))

    out = subprocess.run(
        ["sh", "-c", recipe], cwd=dataset, capture_output=True, text=True, check=True
    )

    assert out.stdout.split()[0] == KNOWN_VERSION, out.stderr


def test_version_ignores_creation_order_and_timestamps(tmp_path: Path) -> None:
    forward = _make(tmp_path / "a", sorted(FILES))
    backward = _make(tmp_path / "b", sorted(FILES, reverse=True))
    os.utime(backward / "README", (1, 1))

    assert build_manifest(forward) == build_manifest(backward)
    assert build_manifest(backward).version == KNOWN_VERSION


def test_one_changed_byte_changes_the_version(dataset: Path) -> None:
    before = build_manifest(dataset).version
    shard = dataset / "train/shard-001.bin"
    shard.write_bytes(b"Second shard")

    assert build_manifest(dataset).version != before


def test_cheap_check_sees_sizes_and_names_full_check_sees_content(dataset: Path) -> None:
    manifest = build_manifest(dataset)
    (dataset / "train/shard-001.bin").write_bytes(b"Second shard")  # same size
    (dataset / "README").write_bytes(b"abc")  # 6 bytes in the manifest
    (dataset / "val/shard-000.bin").unlink()
    (dataset / "train/stray.tmp").write_bytes(b"?")

    cheap = [str(problem) for problem in check(dataset, manifest, full=False)]
    full = check(dataset, manifest, full=True)

    assert cheap == [
        "README: size 3 != 6 (on disk != manifest)",
        "val/shard-000.bin: missing (the manifest lists 0 bytes)",
        "train/stray.tmp: unexpected extra file (not in the manifest)",
    ]
    assert [(p.path, p.kind) for p in full] == [
        ("README", "size"),
        ("train/shard-001.bin", "sha256"),
        ("val/shard-000.bin", "missing"),
        ("train/stray.tmp", "extra"),
    ]
    assert hashlib.sha256(b"Second shard").hexdigest() in full[1].detail


def test_an_unchanged_tree_has_no_problems_and_the_manifest_is_not_extra(dataset: Path) -> None:
    manifest = build_manifest(dataset)
    write_manifest(dataset, manifest)

    assert check(dataset, manifest, full=True) == []
    assert build_manifest(dataset) == manifest
    assert sorted(p.name for p in dataset.iterdir()) == sorted(
        [MANIFEST_NAME, "README", "train", "val"]
    )


def test_symlinks_are_refused_and_reported(dataset: Path, tmp_path: Path) -> None:
    manifest = build_manifest(dataset)
    outside = tmp_path / "secret"
    outside.write_bytes(b"not data")
    (dataset / "train/link.bin").symlink_to(outside)

    with pytest.raises(ManifestError, match=r"train/link\.bin is a symbolic link"):
        build_manifest(dataset)
    assert [(p.path, p.kind) for p in check(dataset, manifest, full=True)] == [
        ("train/link.bin", "extra")
    ]


def test_a_symlink_in_place_of_a_listed_file_is_a_problem(dataset: Path) -> None:
    manifest = build_manifest(dataset)
    (dataset / "README").unlink()
    (dataset / "README").symlink_to(dataset / "train/shard-001.bin")

    assert [(p.path, p.kind) for p in check(dataset, manifest, full=False)] == [
        ("README", "not_a_file")
    ]


def test_json_round_trip_and_atomic_write(dataset: Path) -> None:
    manifest = build_manifest(dataset)

    path = write_manifest(dataset, manifest)

    assert DatasetManifest.from_json(manifest.to_json()) == manifest
    assert read_manifest(dataset) == manifest
    assert json.loads(path.read_text())["version"] == KNOWN_VERSION
    assert [p.name for p in dataset.iterdir() if p.name.startswith(".")] == []


def test_an_edited_manifest_is_not_trusted(dataset: Path) -> None:
    body = json.loads(build_manifest(dataset).to_json())
    body["files"][0]["size"] += 1

    with pytest.raises(ManifestError, match="edited or damaged"):
        DatasetManifest.from_json(json.dumps(body))


@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "a//b", "./a", "a\nb"])
def test_a_manifest_path_outside_the_root_is_refused(path: str) -> None:
    entry = {"path": path, "size": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    body = {"format": "nodeprep.dataset-manifest", "format_version": 1, "files": [entry]}

    with pytest.raises(ManifestError, match="not a plain relative path"):
        DatasetManifest.from_json(json.dumps(body))


def test_names_the_canonical_form_cannot_carry_are_refused(dataset: Path) -> None:
    (dataset / "bad\tname").write_bytes(b"x")

    with pytest.raises(ManifestError, match="control character"):
        build_manifest(dataset)
