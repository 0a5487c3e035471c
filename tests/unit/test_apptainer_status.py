"""The apptainer verify checks' decisions (apptainer_status); the lab runs them for real."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from collection_plugins import load

status = load("apptainer_status")
VERSION = (0, "apptainer version 1.4.1\n", "")


def expect(path: Path, digest: str) -> dict[str, Any]:
    return {"image_path": str(path), "image_sha256": digest, "exec_options": ["--containall"],
            "check_command": "python3 -c 'import torch'", "check_timeout_s": 300}  # fmt: skip


def verdicts(want: dict[str, Any], image: Any, run: Any, version: Any = VERSION) -> Any:
    return {c["check"]: c for c in status.judge(want, version, image, run, (60, 300))}


def test_the_provisioned_image_passes(tmp_path: Path) -> None:
    sif = tmp_path / "trainer.sif"
    sif.write_bytes(b"sif" * 1000)
    digest = hashlib.sha256(sif.read_bytes()).hexdigest()
    assert status.sha256_within(str(sif), time.monotonic() + 60) == digest
    found = verdicts(expect(sif, digest), ("ok", digest), (0, "", ""))
    assert all(c["passed"] for c in found.values()), found
    assert found["apptainer.present"]["detail"] == "found apptainer version 1.4.1"


def test_a_changed_or_missing_image_fails_and_says_what_to_do(tmp_path: Path) -> None:
    want = expect(tmp_path / "trainer.sif", "a" * 64)
    changed = verdicts(want, ("ok", "b" * 64), (0, "", ""))["apptainer.image_hash"]
    assert not changed["passed"]
    assert changed["detail"].endswith("re-run nodeprep provision to copy the image again")
    missing = verdicts(want, ("missing", ""), (255, "", "FATAL: could not open image"))
    assert "is missing" in missing["apptainer.image_hash"]["detail"]
    assert "FATAL: could not open image" in missing["apptainer.runs"]["detail"]


def test_hung_probes_fail_as_timed_out(tmp_path: Path) -> None:
    want = expect(tmp_path / "trainer.sif", "a" * 64)
    found = verdicts(want, ("timeout", ""), (124, "", ""), version=(124, "", ""))
    assert found["apptainer.present"]["detail"].startswith("timed out after 60 s")
    assert found["apptainer.image_hash"]["detail"].endswith("timed out after 60 s")
    assert found["apptainer.runs"]["detail"].startswith("timed out after 300 s")
    assert not any(c["passed"] for c in found.values())
    assert status.sha256_within(__file__, time.monotonic() - 1) is None  # past its deadline


def test_no_distributed_image_skips_the_image_checks() -> None:
    found = verdicts({"image_path": "", "image_sha256": ""}, ("missing", ""), None)
    assert found["apptainer.present"]["passed"]
    assert found["apptainer.image_hash"]["skip"] == "no image was distributed by the apptainer role"
    assert found["apptainer.runs"]["skip"] == "no image was distributed by the apptainer role"
