"""The real apptainer build of the trainer image (conftest's: debootstrap base, torch from the
wheelhouse, --force), then the same inputs again (skipped), then failures: a broken
definition and an option apptainer rejects.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from image_testbed import TORCH_IMAGE, build_image, torch_wheelhouse
from nodeprep.image.build import BuildRequest, run_build
from nodeprep.image.definition import BuildSpec, parse_base
from nodeprep.image.errors import ImageError

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


Built = tuple[subprocess.CompletedProcess[str], str]


def labels(runtime_path: Path, image: Path) -> dict[str, str]:
    done = subprocess.run(
        [str(runtime_path), "inspect", "--json", "--labels", str(image)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    found: dict[str, str] = json.loads(done.stdout)["data"]["attributes"]["labels"]
    return found


def test_build_passes_its_test_section_and_labels_the_inputs(
    runtime_path: Path, built: Built
) -> None:
    done, requirement = built
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r" built in [\d.]+ s \(\d+ MB", done.stdout), done.stdout
    log = TORCH_IMAGE.with_name(TORCH_IMAGE.name + ".build.log").read_text()
    assert "INFO:    Running testscript" in log
    assert "nodeprep 0.1.0" in log.split("Running testscript", 1)[1]
    found = labels(runtime_path, TORCH_IMAGE)
    assert re.fullmatch(r"[0-9a-f]{64}", found["org.nodeprep.content-hash"])
    assert found["org.nodeprep.version"] == "0.1.0"
    assert found["org.nodeprep.base"] == "debootstrap:bookworm"
    assert found["org.nodeprep.torch"] == requirement
    ran = subprocess.run(
        [str(runtime_path), "exec", "--no-privs", str(TORCH_IMAGE), "python", "-c",
         "import nodeprep.contract, nodeprep; print(nodeprep.__file__)"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("/opt/nodeprep/venv/lib/python3")


def test_same_inputs_again_skip_the_build_in_under_a_second(
    runtime_path: Path, built: Built
) -> None:
    assert built[0].returncode == 0
    before = TORCH_IMAGE.stat().st_mtime_ns
    wheelhouse, requirement = torch_wheelhouse()
    again = build_image(
        runtime_path, TORCH_IMAGE, "--wheelhouse", str(wheelhouse), torch=requirement
    )
    assert again.returncode == 0, again.stderr
    seconds = re.search(r"up to date, build skipped in ([\d.]+) s", again.stdout)
    assert seconds, again.stdout
    assert float(seconds.group(1)) < 1.0
    assert TORCH_IMAGE.stat().st_mtime_ns == before


def test_broken_definition_fails_with_the_log_tail(
    runtime_path: Path, built: Built, tmp_path: Path
) -> None:
    assert built[0].returncode == 0
    recipe = tmp_path / "ctx" / "broken.def"
    recipe.parent.mkdir()
    # Built on the image above (no network, seconds): %post fails on purpose.
    recipe.write_text(
        f"Bootstrap: localimage\nFrom: {TORCH_IMAGE}\n\n%post\n"
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
