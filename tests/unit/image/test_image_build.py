"""The build step's decisions: skip an identical image, turn a failed build into a clear error.

apptainer itself is exercised in tests/integration/image; here a stand-in executable
answers for it so the decisions are tested in milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from nodeprep.image.build import HASH_LABEL, BuildRequest, build, run_build
from nodeprep.image.definition import BuildSpec, content_hash, parse_base, template_text
from nodeprep.image.errors import ImageError

REPO = Path(__file__).resolve().parents[3]
# A fake apptainer (a shell script): prints canned labels for `inspect`, fails `build`.
STAND_IN = """#!/bin/sh
echo "$*" >> "{calls}"
case "$1" in
  --version) echo "apptainer version 1.4.5" ;;
  inspect) cat "{labels}" ;;
  build) for i in $(seq 1 60); do echo "INFO:    step $i"; done
         echo "FATAL:   While performing build: %post failed: exit status 3" >&2
         exit 255 ;;
esac
"""


@pytest.fixture
def apptainer(tmp_path: Path) -> Path:
    script = tmp_path / "apptainer"
    script.write_text(STAND_IN.format(calls=tmp_path / "calls", labels=tmp_path / "labels.json"))
    script.chmod(0o755)
    return script


def calls(apptainer: Path) -> list[str]:
    log = apptainer.with_name("calls")
    return log.read_text().splitlines() if log.exists() else []


def request_for(apptainer: Path, output: Path) -> BuildRequest:
    spec = BuildSpec(parse_base("debootstrap:bookworm"), None, None, REPO)
    return BuildRequest(spec, output, apptainer, "http://mirror.invalid/debian")


def write_labels(apptainer: Path, labels: dict[str, str]) -> None:
    body = {"data": {"attributes": {"labels": labels}}, "type": "container"}
    apptainer.with_name("labels.json").write_text(json.dumps(body))


def test_image_with_the_same_content_hash_is_not_rebuilt(apptainer: Path, tmp_path: Path) -> None:
    request = request_for(apptainer, tmp_path / "trainer.sif")
    request.output.write_bytes(b"SIF image bytes")
    write_labels(apptainer, {HASH_LABEL: content_hash(request.spec, template_text())})
    started = time.monotonic()
    result = build(request)
    assert result.skipped
    assert time.monotonic() - started < 5
    assert not any(call.startswith("build") for call in calls(apptainer))
    assert result.image_sha256 == hashlib.sha256(b"SIF image bytes").hexdigest()
    assert (tmp_path / "trainer.sif.sha256").read_text().split()[0] == result.image_sha256


def test_other_hash_or_force_rebuilds_and_failure_shows_the_log_tail(
    apptainer: Path, tmp_path: Path
) -> None:
    request = request_for(apptainer, tmp_path / "trainer.sif")
    request.output.write_bytes(b"old image")
    write_labels(apptainer, {HASH_LABEL: "0" * 64})
    with pytest.raises(ImageError) as caught:
        build(request)
    message = str(caught.value)
    assert message.startswith("The image build from trainer.def failed")
    assert "FATAL:   While performing build: %post failed: exit status 3" in message
    assert "step 60" in message
    assert "step 20" not in message  # only the tail, not the whole log
    assert "apptainer exited with status 255" in message
    assert any(call.startswith("build --fakeroot") for call in calls(apptainer))
    # The old image stays as it was; the full log is kept next to it.
    assert request.output.read_bytes() == b"old image"
    assert "INFO:    step 1\n" in (tmp_path / "trainer.sif.build.log").read_text()


def test_a_build_that_writes_no_image_is_a_failure(tmp_path: Path) -> None:
    quiet = tmp_path / "apptainer"
    quiet.write_text("#!/bin/sh\necho 'INFO:    Build complete'\nexit 0\n")
    quiet.chmod(0o755)
    recipe = tmp_path / "ctx" / "trainer.def"
    recipe.parent.mkdir()
    recipe.write_text("Bootstrap: scratch\n")
    with pytest.raises(ImageError, match="no image was written"):
        run_build(request_for(quiet, tmp_path / "out.sif"), recipe, tmp_path / "x.sif", print)
