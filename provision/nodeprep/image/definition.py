"""The trainer image's definition: its inputs, their content hash, and the rendered text.

The hash names what an image was built from (template, base, torch, nodeprep's sources,
every wheelhouse file), so an unchanged input set is recognised without a rebuild and any
changed input forces one. The mirror is left out on purpose: it says where packages come
from, not what they are, and moving mirrors should not rebuild every image.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import jinja2

from nodeprep import __version__, paths, wheel
from nodeprep.image.errors import ImageInputError

TEMPLATE_NAME = "trainer.def.j2"
HASH_FORMAT = 1
DEFAULT_BASE = "debootstrap:bookworm"
DEFAULT_TORCH = "torch==2.13.0"
_DOCKER = re.compile(r"^docker://(?P<ref>[a-z0-9][\w./:-]*@sha256:[0-9a-f]{64})$")
_SUITE = re.compile(r"^debootstrap:(?P<suite>[a-z]+)$")


@dataclass(frozen=True)
class Base:
    """Where the image's root filesystem comes from."""

    kind: str
    suite: str = ""
    reference: str = ""

    @property
    def label(self) -> str:
        return f"debootstrap:{self.suite}" if self.kind == "debootstrap" else self.reference


def parse_base(text: str) -> Base:
    """``debootstrap:SUITE`` or ``docker://NAME@sha256:DIGEST``; anything else is bad input."""
    suite = _SUITE.match(text)
    if suite:
        return Base("debootstrap", suite=suite.group("suite"))
    docker = _DOCKER.match(text)
    if docker:
        return Base("docker", reference=docker.group("ref"))
    raise ImageInputError(
        f"--base {text!r} is neither debootstrap:SUITE (e.g. {DEFAULT_BASE}) nor a registry "
        "image pinned by digest (docker://NAME@sha256:<64 hex digits>); pin the image by digest."
    )


@dataclass(frozen=True)
class BuildSpec:
    """Everything that decides an image's content."""

    base: Base
    torch: str | None
    wheelhouse: Path | None
    source: Path


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _tree_files(root: Path, names: Iterable[str]) -> list[Path]:
    found: list[Path] = []
    for name in names:
        path = root / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(
                p for p in path.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
            )  # fmt: skip
    return sorted(found)


def source_digest(source: Path) -> str:
    """One hash over every file the nodeprep wheel is built from (path and bytes)."""
    digest = hashlib.sha256()
    for path in _tree_files(source, wheel.INPUTS):
        digest.update(str(path.relative_to(source)).encode() + b"\0")
        digest.update(file_sha256(path).encode() + b"\n")
    return digest.hexdigest()


def wheelhouse_digests(wheelhouse: Path | None) -> dict[str, str]:
    if wheelhouse is None:
        return {}
    return {p.name: file_sha256(p) for p in sorted(wheelhouse.iterdir()) if p.is_file()}


def template_text() -> str:
    return (paths.containers_dir() / TEMPLATE_NAME).read_text()


def content_hash(spec: BuildSpec, template: str) -> str:
    """sha256 over the template and every input; the label that makes rebuilds skippable."""
    inputs = {
        "format": HASH_FORMAT,
        "template": hashlib.sha256(template.encode()).hexdigest(),
        "base": spec.base.label,
        "torch": spec.torch,
        "nodeprep_sources": source_digest(spec.source),
        "wheelhouse": wheelhouse_digests(spec.wheelhouse),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def render(spec: BuildSpec, template: str, digest: str, mirror: str, context: Path) -> str:
    """The definition file text; CONTEXT holds wheels/ with the nodeprep wheel."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(template).render(
        base=spec.base,
        mirror=mirror,
        version=__version__,
        content_hash=digest,
        torch=spec.torch,
        wheelhouse=spec.wheelhouse,
        context=context,
    )
