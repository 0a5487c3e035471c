"""Fetch the upstream release tarball of a Debian source package from the host's mirror.

Roles that build from a release tarball are tested without the internet: Debian ships each
upstream tarball unchanged as `<source>_<upstream>.orig.tar.*` in its pool, and the host's
mirror (the one apt already uses) is reachable where the tests run. The version taken is the
one apt would install on the host, so the pool still holds it.
"""

from __future__ import annotations

import logging
import re
import subprocess
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodeprep.debmirror import debian_mirror
from nodeprep.image.definition import file_sha256
from nodeprep.lab.errors import LabError

log = logging.getLogger(__name__)
_FIELD = re.compile(r"^(Package|Version|Source):\s*(\S+)(?:\s+\((\S+)\))?", re.MULTILINE)


@dataclass(frozen=True)
class OrigTarball:
    """An upstream tarball on this machine, with what a role needs to fetch and verify it."""

    source: str
    upstream_version: str
    path: Path
    sha256: str


def orig_version(debian_version: str) -> str:
    """`1:3.3a-3+deb12u1` -> `3.3a`: drop the epoch and the Debian revision.

    The version in the orig tarball's file name, so a repackaging suffix (`+dfsg`) stays;
    the collection's module_utils.versions.upstream_version drops it to compare releases.
    """
    version = debian_version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


def parse_apt_show(text: str) -> tuple[str, str]:
    """(source package, Debian version) from `apt-cache show --no-all-versions` output.

    A binary package built from a source of another name says so in `Source:`, optionally
    with the source's own version in parentheses.
    """
    fields: dict[str, tuple[str, str | None]] = {}
    for name, value, paren in _FIELD.findall(text):
        fields.setdefault(name, (value, paren or None))
    if "Package" not in fields or "Version" not in fields:
        raise LabError(f"apt-cache printed no Package/Version fields: {text[:200]!r}")
    version = fields["Version"][0]
    source, source_version = fields.get("Source", (fields["Package"][0], None))
    return source, source_version or version


def pool_url(mirror: str, source: str, upstream: str, suffix: str = "tar.gz") -> str:
    """Where Debian's pool keeps a source package's orig tarball."""
    prefix = source[:4] if source.startswith("lib") else source[0]
    return f"{mirror.rstrip('/')}/pool/main/{prefix}/{source}/{source}_{upstream}.orig.{suffix}"


def apt_candidate(package: str) -> tuple[str, str]:
    """The source package and version apt would install for `package` on this host."""
    done = subprocess.run(
        ["apt-cache", "show", "--no-all-versions", package],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    if done.returncode != 0 or not done.stdout.strip():
        raise LabError(f"apt-cache knows no package {package!r} here: {done.stderr.strip()}")
    return parse_apt_show(done.stdout)


def fetch_orig_tarball(
    package: str,
    cache: Path,
    mirror: str | None = None,
    candidate: Callable[[str], tuple[str, str]] = apt_candidate,
) -> OrigTarball:
    """The orig tarball of `package`'s source, downloaded once into `cache` and reused."""
    source, version = candidate(package)
    upstream = orig_version(version)
    target = cache / f"{source}_{upstream}.orig.tar.gz"
    if not target.is_file():
        url = pool_url(mirror or debian_mirror(), source, upstream)
        cache.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".part")
        log.info("downloading %s", url)
        try:
            with urllib.request.urlopen(url, timeout=120) as answer:
                partial.write_bytes(answer.read())
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise LabError(f"Could not download {url}: {exc}") from exc
        partial.rename(target)
    return OrigTarball(source, upstream, target, file_sha256(target))
