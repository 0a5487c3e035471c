"""Build the trainer image through spython, or recognise that it is already built.

spython drives the build; apptainer itself stands behind a ``singularity`` wrapper on a
private PATH (spython runs that name), which also folds apptainer's stderr into the one
stream spython reads, so progress and the build log come from a single, unblocked pipe.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from nodeprep import wheel
from nodeprep.image.definition import BuildSpec, content_hash, file_sha256, render, template_text
from nodeprep.image.errors import ImageError

log = logging.getLogger(__name__)
HASH_LABEL = "org.nodeprep.content-hash"
LOG_TAIL_LINES = 25
# Lines that say why a build failed, wherever they are in the log (usage text can bury them).
ERROR_PREFIXES = ("FATAL", "ERROR", "Error", "E:")


@dataclass(frozen=True)
class BuildRequest:
    spec: BuildSpec
    output: Path
    apptainer: Path
    mirror: str
    build_options: tuple[str, ...] = ("--fakeroot",)
    force: bool = False


@dataclass(frozen=True)
class BuildResult:
    image: Path
    content_hash: str
    skipped: bool
    seconds: float
    size_bytes: int
    image_sha256: str


def sidecar(image: Path, suffix: str) -> Path:
    return image.with_name(image.name + suffix)


def image_labels(apptainer: Path, image: Path) -> dict[str, str]:
    """The image's labels as ``apptainer inspect`` reads them; empty when it cannot."""
    done = subprocess.run(
        [str(apptainer), "inspect", "--json", "--labels", str(image)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return {}
    try:
        labels = json.loads(done.stdout)["data"]["attributes"]["labels"]
    except (ValueError, KeyError, TypeError):
        return {}
    return {str(k): str(v) for k, v in labels.items()}


def build(request: BuildRequest, on_line: Callable[[str], None] | None = None) -> BuildResult:
    """Build REQUEST.output unless an image with the same content hash is already there."""
    started = time.monotonic()
    template = template_text()
    digest = content_hash(request.spec, template)
    output = request.output
    if not request.force and output.exists():
        if image_labels(request.apptainer, output).get(HASH_LABEL) == digest:
            return _result(output, digest, started, skipped=True)
        log.info("%s was built from other inputs; rebuilding", output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # In the output's directory, so the finished image moves into place with one rename.
    with tempfile.TemporaryDirectory(dir=output.parent, prefix=".nodeprep-build-") as tmp:
        context = Path(tmp)
        build_wheel(request.spec.source, context / "wheels")
        recipe = context / "trainer.def"
        recipe.write_text(render(request.spec, template, digest, request.mirror, context))
        partial = context / "image.sif"
        run_build(request, recipe, partial, on_line or (lambda _line: None))
        sidecar(output, ".sha256").unlink(missing_ok=True)
        os.replace(partial, output)
    return _result(output, digest, started, skipped=False)


def _result(output: Path, digest: str, started: float, skipped: bool) -> BuildResult:
    """The image's sha256 is kept next to it, so a skipped build need not re-read the image."""
    stamp = sidecar(output, ".sha256")
    stat = output.stat()
    if stamp.exists() and stamp.stat().st_mtime >= stat.st_mtime:
        image_sha256 = stamp.read_text().split()[0]
    else:
        image_sha256 = file_sha256(output)
        stamp.write_text(f"{image_sha256}  {output.name}\n")
    seconds = time.monotonic() - started
    return BuildResult(output, digest, skipped, seconds, stat.st_size, image_sha256)


def build_wheel(source: Path, dest: Path) -> Path:
    """nodeprep as a wheel from the checkout SOURCE, the way it is shipped to nodes."""
    try:
        return wheel.build_wheel(source, dest)
    except wheel.WheelError as exc:
        raise ImageError(str(exc)) from exc


@contextlib.contextmanager
def _singularity_on_path(apptainer: Path, workdir: Path) -> Iterator[None]:
    """Put a ``singularity`` that runs APPTAINER (stderr into stdout) first on PATH."""
    bindir = workdir / "bin"
    bindir.mkdir()
    wrapper = bindir / "singularity"
    wrapper.write_text(f'#!/bin/sh\nexec "{apptainer}" "$@" 2>&1\n')
    wrapper.chmod(0o755)
    saved = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{bindir}{os.pathsep}{saved}"
    try:
        yield
    finally:
        os.environ["PATH"] = saved


def run_build(
    request: BuildRequest, recipe: Path, image: Path, on_line: Callable[[str], None]
) -> None:
    """Run ``apptainer build`` through spython; a failure raises with the log's last lines."""
    from spython.main import Client

    log_path = sidecar(request.output, ".build.log")
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    errors: list[str] = []
    failure = ""
    with log_path.open("w") as log_file, _singularity_on_path(request.apptainer, recipe.parent):
        try:
            # stream=True hands back (image, lines); on failure the line iterator raises.
            # Without streaming spython returns None instead: both mean "no image".
            built = Client.build(recipe=str(recipe), image=str(image), sudo=False, stream=True,
                                 options=list(request.build_options), quiet=True)  # fmt: skip
            lines = built[1] if built is not None else iter(())
            for line in lines:
                log_file.write(line)
                tail.append(line.rstrip())
                if line.startswith(ERROR_PREFIXES) and len(errors) < 5:
                    errors.append(line.strip())
                on_line(line.rstrip())
            failure = "" if built is not None else "spython returned no image"
        except subprocess.CalledProcessError as error:
            failure = f"apptainer exited with status {error.returncode}"
    if failure or not image.exists():
        buried = "".join(f"\n  {line}" for line in errors if line not in tail)
        text = "\n".join(f"  | {line}" for line in tail)
        raise ImageError(
            f"The image build from {recipe.name} failed ({failure or 'no image was written'}); "
            + (f"errors:{buried}\n" if buried else "")
            + f"last lines of the build log (full log: {log_path}):\n{text}"
        )
