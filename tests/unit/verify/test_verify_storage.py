"""The disk and checkpoint probes on real files: checkpoints written by the real checkpoint core."""

from __future__ import annotations

import inspect
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from collection_plugins import load
from nodeprep.checkpoint import CheckpointInvalidError, commit_checkpoint, verify

checkpoints = load("nodeprep_checkpoints")
disk = load("nodeprep_disk")


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    root = tmp_path / "checkpoints"
    for step, layer in ((4, "full"), (8, "full"), (10, "light"), (12, "full")):
        commit_checkpoint(root, step, layer, {"model.pt": {"w": torch.full((64,), float(step))}})
    return root


def test_intact_checkpoints_verify_like_the_core(run_dir: Path) -> None:
    survey = checkpoints.survey(str(run_dir))
    assert [(r["name"], r["valid"]) for r in survey["checkpoints"]] == [
        ("ckpt-0000000012-full", True),
        ("ckpt-0000000010-light", True),
        ("ckpt-0000000008-full", True),
        ("ckpt-0000000004-full", True),
    ]
    verdict = checkpoints.judge([survey])
    assert verdict["passed"]
    assert "a resume loads ckpt-0000000012-full" in verdict["detail"]


def test_corrupt_newest_fails_and_names_the_fallback(run_dir: Path) -> None:
    payload = run_dir / "ckpt-0000000012-full" / "model.pt"
    data = bytearray(payload.read_bytes())
    data[len(data) // 2] ^= 0xFF
    payload.write_bytes(bytes(data))
    with pytest.raises(CheckpointInvalidError):
        verify(payload.parent)  # the core refuses it too
    verdict = checkpoints.judge([checkpoints.survey(str(run_dir))])
    assert not verdict["passed"]
    assert verdict["detail"] == (
        f"The newest checkpoint {run_dir}/ckpt-0000000012-full fails verification "
        "(model.pt sha256 does not match manifest); a resume falls back to "
        "ckpt-0000000008-full (step 8)."
    )


def test_verify_judges_with_the_very_file_the_core_resumes_with() -> None:
    from nodeprep.checkpoint import manifest

    ours = Path(inspect.getfile(checkpoints.verify)).resolve()
    assert ours == Path(inspect.getfile(manifest.verify)).resolve()
    assert checkpoints.verify.__module__.startswith("ansible_collections.nodeprep.hardening.")


def test_a_bumped_format_version_is_refused_by_verify_as_by_resume(run_dir: Path) -> None:
    newest = run_dir / "ckpt-0000000012-full" / "manifest.json"
    newest.write_text(newest.read_text().replace('"format_version": 2', '"format_version": 3'))
    with pytest.raises(CheckpointInvalidError) as core:
        verify(newest.parent)
    (row, *_) = checkpoints.survey(str(run_dir))["checkpoints"]
    assert not row["valid"]
    assert str(core.value) == f"{newest.parent.name}: {row['problem']}"


def test_no_checkpoint_yet_skips(tmp_path: Path) -> None:
    verdict = checkpoints.judge([checkpoints.survey(str(tmp_path))])
    assert verdict["skip"] == f"no committed checkpoint yet in {tmp_path}"


def test_disk_passes_on_a_roomy_writable_directory(tmp_path: Path) -> None:
    items = [{"path": str(tmp_path), "min_size_gb": 0.001, "min_free_gb": 0.001}]
    found = {c["check"]: c for c in disk.judge(items, [disk.probe(str(tmp_path))])}
    assert all(c["passed"] for c in found.values()), found
    assert "took a write with fsync" in found["disk.writable"]["detail"]
    assert list(tmp_path.iterdir()) == []  # the probe file is gone


@pytest.fixture
def full_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 4 MiB tmpfs, filled to the last byte, unmounted even when the test fails."""
    mount = tmp_path / "full"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={mount}/fill", "bs=64k"], check=False, capture_output=True
        )
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_disk_fails_on_a_full_small_filesystem(full_fs: Path, tmp_path: Path) -> None:
    items = [{"path": str(full_fs), "min_size_gb": 1, "min_free_gb": 0.5}]
    found = {c["check"]: c for c in disk.judge(items, [disk.probe(str(full_fs))])}
    assert not any(c["passed"] for c in found.values()), found
    assert "expected >= 1 GiB; grow the volume" in found["disk.size"]["detail"]
    assert f"{full_fs} has 0.00 GiB free, need 0.5 GiB" in found["disk.free"]["detail"]
    assert "No space left on device" in found["disk.writable"]["detail"]
    missing = disk.judge([{"path": str(tmp_path / "nope")}], [disk.probe(str(tmp_path / "nope"))])
    assert [c["passed"] for c in missing] == [False, False, False]
    assert "does not exist" in missing[1]["detail"]
