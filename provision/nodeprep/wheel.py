"""A wheel of the running nodeprep, so nodes install the controller's exact version offline.

Nodes on a training cluster often have no package index; the heartbeat role (and the image
build) copy this wheel instead. It is built from the checkout nodeprep runs from, once per
content: the cache key hashes every file that goes into the wheel.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from nodeprep import paths

log = logging.getLogger(__name__)

# What the wheel is made of (see pyproject.toml's build targets): the package and the
# nodeprep.hardening collection it carries. Image builds hash the same list.
INPUTS = (
    "pyproject.toml", "README.md", "ansible.cfg", "galaxy.yml", "meta", "plugins",
    "provision/nodeprep", "playbooks", "roles", "containers",
)  # fmt: skip
_SKIP_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache"}


class WheelError(RuntimeError):
    """The wheel could not be built; the message says why and what to do."""


def source_root() -> Path | None:
    """The checkout nodeprep runs from, or None when it is installed from a wheel."""
    root = paths.data_dir()
    return root if (root / "pyproject.toml").is_file() and (root / "provision").is_dir() else None


def content_digest(root: Path) -> str:
    """A hash of every file that goes into the wheel (names and bytes)."""
    digest = hashlib.sha256()
    for name in INPUTS:
        base = root / name
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for path in files:
            if _SKIP_PARTS.intersection(path.parts) or path.suffix == ".pyc":
                continue
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def controller_wheel(cache: Path) -> Path | None:
    """The running checkout as a wheel (built once per content); None when not a checkout."""
    root = source_root()
    if root is None:
        return None
    target = cache / content_digest(root)
    built = sorted(target.glob("nodeprep-*.whl"))
    if built:
        return built[0]
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        log.info("building a nodeprep wheel from %s", root)
        target.mkdir(exist_ok=True)
        built_wheel = build_wheel(root, Path(tmp))
        shutil.move(str(built_wheel), target / built_wheel.name)
    return sorted(target.glob("nodeprep-*.whl"))[0]


def build_wheel(source: Path, dest: Path) -> Path:
    """nodeprep as a wheel from the checkout SOURCE into DEST, the way nodes receive it."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
         "-w", str(dest), str(source)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    wheels = sorted(dest.glob("nodeprep-*.whl")) if dest.is_dir() else []
    if done.returncode != 0 or not wheels:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-10:])
        raise WheelError(
            f"Building a nodeprep wheel from {source} failed (pip exit {done.returncode}); "
            f"pip said:\n{tail}"
        )
    return wheels[0]


def dependency_wheel(name: str, cache: Path, variable: str) -> Path:
    """The wheel of the NAME this controller has installed, fetched once into CACHE.

    The nodes install nodeprep with --no-deps (its controller-side dependencies have no place
    there); what the node-side code imports besides the standard library is shipped this way,
    at the version the controller runs and was tested with. pip serves it from its own cache
    after the first time.
    """
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError as exc:
        raise WheelError(f"{name} is not installed here; reinstall nodeprep (make setup).") from exc
    stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"
    found = sorted(p for p in cache.glob("*.whl") if p.name.lower().startswith(stem))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    log.info("fetching the %s %s wheel for the nodes", name, version)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
         "--disable-pip-version-check", "-d", str(cache), f"{name}=={version}"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    found = sorted(p for p in cache.glob("*.whl") if p.name.lower().startswith(stem))
    if done.returncode != 0 or not found:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise WheelError(
            f"Fetching the {name} {version} wheel for the nodes failed (pip exit "
            f"{done.returncode}); put it in {cache} or pass its path with -e {variable}=PATH; "
            f"pip said:\n{tail}"
        )
    return found[0]
