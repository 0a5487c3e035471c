"""A real apptainer build of the trainer image (debootstrap base, no torch, to fit CI's budget).

One build per run (--force), then the same inputs again (skipped), then failures: a broken
definition and an option apptainer rejects. The image is left in the cache for the lab tier.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from image_testbed import SLIM_IMAGE, apptainer, build_image
from nodeprep.image.build import BuildRequest, run_build
from nodeprep.image.definition import BuildSpec, parse_base
from nodeprep.image.errors import ImageError

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def runtime_path() -> Path:
    return apptainer()


@pytest.fixture(scope="module")
def built(runtime_path: Path) -> subprocess.CompletedProcess[str]:
    return build_image(runtime_path, SLIM_IMAGE, "--force")


def labels(runtime_path: Path, image: Path) -> dict[str, str]:
    done = subprocess.run(
        [str(runtime_path), "inspect", "--json", "--labels", str(image)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    found: dict[str, str] = json.loads(done.stdout)["data"]["attributes"]["labels"]
    return found


def test_build_passes_its_test_section_and_labels_the_inputs(
    runtime_path: Path, built: subprocess.CompletedProcess[str]
) -> None:
    assert built.returncode == 0, built.stdout + built.stderr
    assert re.search(r" built in [\d.]+ s \(\d+ MB", built.stdout), built.stdout
    log = SLIM_IMAGE.with_name(SLIM_IMAGE.name + ".build.log").read_text()
    assert "INFO:    Running testscript" in log
    assert "nodeprep 0.1.0" in log.split("Running testscript", 1)[1]
    found = labels(runtime_path, SLIM_IMAGE)
    assert re.fullmatch(r"[0-9a-f]{64}", found["org.nodeprep.content-hash"])
    assert found["org.nodeprep.version"] == "0.1.0"
    assert found["org.nodeprep.base"] == "debootstrap:bookworm"
    assert found["org.nodeprep.torch"] == "none"
    ran = subprocess.run(
        [str(runtime_path), "exec", "--no-privs", str(SLIM_IMAGE), "python", "-c",
         "import nodeprep.contract, nodeprep; print(nodeprep.__file__)"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("/opt/nodeprep/venv/lib/python3")


def test_same_inputs_again_skip_the_build_in_under_a_second(
    runtime_path: Path, built: subprocess.CompletedProcess[str]
) -> None:
    assert built.returncode == 0
    before = SLIM_IMAGE.stat().st_mtime_ns
    again = build_image(runtime_path, SLIM_IMAGE)
    assert again.returncode == 0, again.stderr
    seconds = re.search(r"up to date, build skipped in ([\d.]+) s", again.stdout)
    assert seconds, again.stdout
    assert float(seconds.group(1)) < 1.0
    assert SLIM_IMAGE.stat().st_mtime_ns == before


def test_broken_definition_fails_with_the_log_tail(
    runtime_path: Path, built: subprocess.CompletedProcess[str], tmp_path: Path
) -> None:
    assert built.returncode == 0
    recipe = tmp_path / "ctx" / "broken.def"
    recipe.parent.mkdir()
    # Built on the image above (no network, seconds): %post fails on purpose.
    recipe.write_text(
        f"Bootstrap: localimage\nFrom: {SLIM_IMAGE}\n\n%post\n"
        "    echo 'about to fail on purpose'\n    exit 3\n"
    )
    spec = BuildSpec(parse_base("debootstrap:bookworm"), None, None, REPO)
    request = BuildRequest(spec, tmp_path / "broken.sif", runtime_path, "")
    lines: list[str] = []
    with pytest.raises(ImageError) as caught:
        run_build(request, recipe, tmp_path / "ctx" / "image.sif", lines.append)
    message = str(caught.value)
    assert "The image build from broken.def failed (apptainer exited with status" in message
    assert "about to fail on purpose" in message
    assert any("about to fail on purpose" in line for line in lines)
    assert not (tmp_path / "ctx" / "image.sif").exists()


def test_option_apptainer_rejects_exits_1_with_its_message(
    runtime_path: Path, tmp_path: Path
) -> None:
    output = tmp_path / "never.sif"
    done = build_image(runtime_path, output, "--build-option", "--no-such-option")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "nodeprep: build-image failed: The image build from trainer.def failed" in done.stderr
    assert "unknown flag: --no-such-option" in done.stderr
    assert not output.exists()
