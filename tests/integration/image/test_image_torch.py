"""The trainer image with torch (conftest's build): its %test resumed bit-exact, and the
trainer inside it trains, is SIGKILLed and resumes bit-exact, through a launcher and with the
whole drill inside the image; test_image_build.py covers the cached skip and build failures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from image_testbed import TORCH_IMAGE

pytestmark = pytest.mark.integration


def test_build_from_the_wheelhouse_passes_its_resume_test(
    runtime_path: Path, built: tuple[subprocess.CompletedProcess[str], str]
) -> None:
    done, requirement = built
    assert done.returncode == 0, done.stdout + done.stderr
    log = TORCH_IMAGE.with_name(TORCH_IMAGE.name + ".build.log").read_text()
    tested = log.split("Running testscript", 1)[1]
    assert f"torch {requirement.split('==')[1]}" in tested
    assert "trainer resumed bit-exact: " in tested
    shown = subprocess.run(
        [str(runtime_path), "inspect", "--json", "--labels", str(TORCH_IMAGE)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    labels = json.loads(shown.stdout)["data"]["attributes"]["labels"]
    assert labels["org.nodeprep.torch"] == requirement


@pytest.mark.parametrize("where", ["launcher", "inside"])
def test_trainer_in_the_image_is_killed_and_resumes_bit_exact(
    runtime_path: Path,
    built: tuple[subprocess.CompletedProcess[str], str],
    tmp_path: Path,
    where: str,
) -> None:
    """launcher: this Python drives, the trainer runs through `apptainer exec`; inside: the
    whole drill runs in the image, as `nodeprep verify` runs it on a node with the image."""
    assert built[0].returncode == 0
    image = f"{runtime_path} exec --no-privs {TORCH_IMAGE}"
    drill = ["-m", "nodeprep.smoke", "--work-dir", str(tmp_path), "--steps", "24",
             "--checkpoint-every", "4"]  # fmt: skip
    argv = (
        [sys.executable, *drill, "--launcher", image]
        if where == "launcher"
        else [*image.split(), "python3", *drill]
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.stdout.strip(), done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"drill ({where}): {result['detail']} ({result['seconds']} s)")
    assert done.returncode == 0, result
    assert result["passed"], result
    assert result["inside_image"], result
    assert f"{TORCH_IMAGE}, SIGKILL after step" in result["detail"], result
    assert result["resumed_hash"] == result["reference_hash"], result
    assert result["resumed_from"] is not None, result
    assert result["resumed_from"] >= 4, result  # from a checkpoint, not from step 0
    # The SIGKILL reached the trainer inside the container: nothing of the drill runs on.
    left = subprocess.run(
        ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert left.stdout == "", f"processes of the drill still running: {left.stdout}"
