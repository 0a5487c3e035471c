"""The inputs of ``nodeprep build-image``, validated before anything is built.

Each refusal is an :class:`ImageInputError` (exit 2) naming the option and the fix. The
CLI only parses options into :class:`BuildInputs` and prints what :func:`build_request`
decided.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from nodeprep import paths
from nodeprep.debmirror import MirrorNotFoundError, debian_mirror
from nodeprep.image import runtime
from nodeprep.image.build import BuildRequest
from nodeprep.image.definition import BuildSpec, parse_base
from nodeprep.image.errors import ImageInputError


@dataclass(frozen=True)
class BuildInputs:
    """The build-image options as given, before validation."""

    base: str
    wheelhouse: Path | None
    torch_spec: str
    output: Path
    force: bool
    apptainer: str
    build_options: tuple[str, ...]
    source: Path | None


def build_request(given: BuildInputs) -> BuildRequest:
    """Validate every input before anything is built; ImageInputError names the one that is bad."""
    spec = BuildSpec(
        base=parse_base(given.base),
        torch=None if given.torch_spec == "none" else given.torch_spec,
        wheelhouse=_wheelhouse(given.wheelhouse),
        source=_checkout(given.source),
    )
    output = given.output
    if output.is_dir() or not os.access(_existing_parent(output), os.W_OK):
        raise ImageInputError(f"--output {output} is not a writable file path; choose another.")
    mirror = _mirror() if spec.base.kind == "debootstrap" else ""
    if "--fakeroot" in given.build_options and os.geteuid() == 0:
        _require_subids()
    apptainer = _apptainer(given.apptainer, mirror)
    return BuildRequest(spec, output.resolve(), apptainer, mirror, given.build_options, given.force)


def _mirror() -> str:
    try:
        return debian_mirror()
    except MirrorNotFoundError as exc:
        raise ImageInputError(str(exc)) from None


def _wheelhouse(path: Path | None) -> Path | None:
    if path is None:
        return None
    if not path.is_dir() or not any(path.glob("*.whl")):
        raise ImageInputError(
            f"--wheelhouse {path} holds no .whl files; fill it with "
            "`pip download torch==2.13.0 -d DIR` or leave the option out."
        )
    return path.resolve()


def _checkout(source: Path | None) -> Path:
    root = source or paths.data_dir()
    if not (root / "pyproject.toml").is_file() or not (root / "provision" / "nodeprep").is_dir():
        raise ImageInputError(
            f"{root} is not a nodeprep checkout (no pyproject.toml with "
            "provision/nodeprep); pass --source CHECKOUT."
        )
    return root.resolve()


def _existing_parent(path: Path) -> Path:
    for parent in path.absolute().parents:
        if parent.exists():
            return parent
    return Path("/")


SUBID_FILES = (Path("/etc/subuid"), Path("/etc/subgid"))
# Apptainer's --fakeroot maps a full 16-bit range of subordinate ids (apptainer#692: fewer
# end in a misleading error deep inside the build).
SUBID_RANGE = 65536


def _require_subids(files: tuple[Path, ...] = SUBID_FILES) -> None:
    for path in files:
        text = path.read_text(errors="replace") if path.is_file() else ""
        problem = subid_problem(text, path)
        if problem:
            raise ImageInputError(problem)


def subid_problem(text: str, path: Path) -> str | None:
    """Why ``text`` (a subuid/subgid file) gives root no usable range for --fakeroot, or None."""
    ranges = [line.split(":") for line in text.splitlines() if line.startswith("root:")]
    fix = f"add `root:100000:{SUBID_RANGE}` to {path} and run again"
    if not ranges:
        return f"--fakeroot as root needs a root entry in {path}; {fix}."
    if any(_holds_a_full_range(fields) for fields in ranges):
        return None
    shown = ", ".join(":".join(fields) for fields in ranges)
    return (
        f"--fakeroot as root needs {SUBID_RANGE} subordinate ids in {path}, and its root "
        f"entries ({shown}) hold fewer; {fix}."
    )


def _holds_a_full_range(fields: list[str]) -> bool:
    return (
        len(fields) == 3
        and fields[1].isdigit()
        and fields[2].isdigit()
        and (int(fields[2]) >= SUBID_RANGE)
    )


def _apptainer(choice: str, mirror: str) -> Path:
    if choice == runtime.ROOTFS_CHOICE:
        return runtime.rootfs_apptainer(runtime.cache_dir(), mirror or _mirror())
    found = shutil.which(choice)
    if found is None or not runtime.runs(found):
        raise ImageInputError(
            f"--apptainer {choice} does not run here; install apptainer (Debian 13: the sid "
            f"package) or pass --apptainer {runtime.ROOTFS_CHOICE} on Debian 12."
        )
    return Path(found)
