"""``nodeprep build-image``: build the trainer image once, to copy to every node."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from nodeprep.cli.errors import BadInput
from nodeprep.cli.progress import Ticker
from nodeprep.image import runtime
from nodeprep.image.build import BuildRequest, BuildResult, build
from nodeprep.image.definition import DEFAULT_BASE, DEFAULT_TORCH
from nodeprep.image.errors import ImageError, ImageInputError
from nodeprep.image.request import BuildInputs, build_request

DEFAULT_OUTPUT = Path("nodeprep-trainer.sif")


class BuildFailed(click.ClickException):
    """The build ran and failed; exit 1."""

    exit_code = 1

    def show(self, file: object = None) -> None:
        click.echo(f"nodeprep: build-image failed: {self.format_message()}", err=True)


@click.command(name="build-image")
@click.option(
    "--base",
    default=DEFAULT_BASE,
    show_default=True,
    help="debootstrap:SUITE, or docker://NAME@sha256:DIGEST (pinned by digest).",
)
@click.option(
    "--wheelhouse",
    type=click.Path(file_okay=False, path_type=Path),
    help="Install torch from the wheels in DIR, offline (`pip download torch -d DIR`).",
)
@click.option(
    "--torch",
    "torch_spec",
    default=DEFAULT_TORCH,
    show_default=True,
    help="The torch requirement; 'none' leaves torch out (a base that carries it).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_OUTPUT,
    show_default=True,
    help="Where the .sif image goes.",
)
@click.option("--force", is_flag=True, help="Build even when an identical image exists.")
@click.option(
    "--apptainer",
    "apptainer_path",
    default="apptainer",
    show_default=True,
    help=f"The apptainer executable; '{runtime.ROOTFS_CHOICE}' runs it from a cached "
    "Debian 13 root filesystem (for Debian 12 hosts; needs root).",
)
@click.option(
    "--build-option",
    "build_options",
    multiple=True,
    default=("--fakeroot",),
    show_default=True,
    help="An option for `apptainer build` (repeatable).",
)
@click.option(
    "--source",
    type=click.Path(file_okay=False, path_type=Path),
    help="The nodeprep checkout to build the wheel from (default: this one).",
)
def build_image(
    base: str,
    wheelhouse: Path | None,
    torch_spec: str,
    output: Path,
    force: bool,
    apptainer_path: str,
    build_options: tuple[str, ...],
    source: Path | None,
) -> None:
    """Build the trainer image (nodeprep + torch) with apptainer, through spython.

    An image already at --output with the same content hash (template, base, torch,
    nodeprep's sources, wheelhouse files) is kept and the build skipped. Exit codes:
    0 built or up to date, 1 the build failed, 2 bad input (nothing was built).

    \b
    Examples:
      nodeprep build-image --wheelhouse ./wheels -o trainer.sif
      nodeprep build-image --base docker://pytorch/pytorch@sha256:<digest> --torch none
      nodeprep build-image --apptainer debian13-rootfs --wheelhouse ./wheels
    """
    console = Console(highlight=False, stderr=True)
    try:
        request = build_request(
            BuildInputs(base, wheelhouse, torch_spec, output, force, apptainer_path,
                        build_options, source)
        )  # fmt: skip
        result = _run(console, request)
    except ImageInputError as error:
        raise BadInput(str(error)) from error
    except ImageError as error:
        raise BuildFailed(str(error)) from error
    verb = "up to date, build skipped" if result.skipped else "built"
    click.echo(
        f"nodeprep: {result.image} {verb} in {result.seconds:.2f} s "
        f"({result.size_bytes / 1e6:.0f} MB, content {result.content_hash[:16]}, "
        f"sha256 {result.image_sha256})"
    )


def _run(console: Console, request: BuildRequest) -> BuildResult:
    """Build with a live status line on a terminal, apptainer's step lines otherwise."""
    if not console.is_terminal:
        last = ["starting"]
        ticker = Ticker(console, lambda: f"building the image (last step: {last[0][:100]})")

        def plain(line: str) -> None:
            if line.strip():
                last[0] = line.strip()
            if _plain(console, line):
                ticker.mark()

        with ticker:
            return build(request, on_line=plain)
    with console.status("building the image") as status:
        return build(request, on_line=lambda line: status.update(f"building: {line[:100]}"))


def _plain(console: Console, line: str) -> bool:
    """Print apptainer's own step lines; whether LINE was one."""
    if line.startswith(("INFO:", "WARNING:", "FATAL:", "ERROR:")):
        console.print(line, markup=False, soft_wrap=True)
        return True
    return False
