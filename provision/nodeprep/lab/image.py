"""Build the node image from Debian packages once, and find it in the cache afterwards.

No loop devices or mounts are needed: mmdebstrap fills a directory, mkfs.ext4 -d copies it
into a partition inside a plain file, and qemu-img turns that into the qcow2 base that node
overlays point at. The kernel and initrd are kept beside it for a direct boot.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from nodeprep.debmirror import debian_mirror
from nodeprep.lab.errors import LabError, LabInputError
from nodeprep.lab.proc import run_logged, run_quiet
from nodeprep.lab.recipe import DATA_LABEL, ROOT_LABEL, Recipe

log = logging.getLogger(__name__)
_PARTITION_OFFSET = 1024 * 1024
_TOOLS = ("mmdebstrap", "sfdisk", "mkfs.ext4", "qemu-img", "ssh-keygen")


@dataclass(frozen=True)
class Image:
    """A built image in the cache; everything a node needs to boot from it."""

    directory: Path

    @property
    def root(self) -> Path:
        return self.directory / "root.qcow2"

    @property
    def data(self) -> Path:
        return self.directory / "data.qcow2"

    @property
    def kernel(self) -> Path:
        return self.directory / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.directory / "initrd.img"

    @property
    def bootstrap_key(self) -> Path:
        """The image's own key; each lab swaps it for a per-lab key once a node is up."""
        return self.directory / "bootstrap_ed25519"

    @property
    def digest(self) -> str:
        return self.directory.name


def cached_image(recipe: Recipe, cache: Path) -> Image | None:
    """The cached image for this recipe, or None when it has not been built."""
    image = Image(cache / "images" / recipe.digest())
    return image if (image.directory / "manifest.json").is_file() else None


def ensure_image(recipe: Recipe, cache: Path) -> Image:
    """Return the cached image, building it first when missing (one builder at a time)."""
    found = cached_image(recipe, cache)
    if found is not None:
        log.info("image %s found in cache %s", found.digest, found.directory)
        return found
    (cache / "images").mkdir(parents=True, exist_ok=True)
    with (cache / "images" / f"{recipe.digest()}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = cached_image(recipe, cache)
        return found if found is not None else build_image(recipe, cache)


def _check_tools() -> None:
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        raise LabInputError(
            f"The lab image build needs {', '.join(missing)}; "
            "install the packages in .ci/apt-packages.txt (make system-packages) and run again."
        )
    if os.geteuid() != 0:
        raise LabInputError("The lab image build needs root (mmdebstrap chroots); run it as root.")


def _mounts_under(path: Path) -> list[str]:
    """Mount points inside path, deepest first (a killed mmdebstrap can leave its chroot's)."""
    prefix = str(path.resolve()) + "/"
    found = []
    for line in Path("/proc/mounts").read_text().splitlines():
        point = line.split()[1].replace("\\040", " ")
        if point.startswith(prefix):
            found.append(point)
    return sorted(found, key=len, reverse=True)


def remove_build_dir(path: Path) -> None:
    """Remove a build directory, unmounting first: deleting through /dev or /proc is harmful."""
    if not path.exists():
        return
    for point in _mounts_under(path):
        log.warning("unmounting %s left by an interrupted build", point)
        run_quiet(["umount", "--lazy", point], "umount")
    if _mounts_under(path):
        raise LabError(f"{path} still has mounts; unmount them and remove it by hand.")
    shutil.rmtree(path)


def build_image(recipe: Recipe, cache: Path) -> Image:
    """Build the image into a scratch directory, then rename it into place atomically."""
    _check_tools()
    final = cache / "images" / recipe.digest()
    work = final.with_name(final.name + ".partial")
    remove_build_dir(work)
    work.mkdir(parents=True)
    started = time.monotonic()
    log.info("building image %s (Debian %s) in %s", recipe.digest(), recipe.distro, work)
    try:
        image = Image(work)
        run_quiet(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "nodeprep-lab-image",
             "-f", str(image.bootstrap_key)],
            "ssh-keygen",
        )  # fmt: skip
        rootfs = work / "rootfs"
        _bootstrap(recipe, rootfs, image.bootstrap_key.with_suffix(".pub").read_text())
        _copy_boot_files(rootfs, image)
        _make_disk(work / "root.raw", recipe.root_size_mb, ROOT_LABEL, rootfs, image.root)
        shutil.rmtree(rootfs)
        _make_disk(work / "data.raw", recipe.data_size_mb, DATA_LABEL, None, image.data)
        seconds = round(time.monotonic() - started, 1)
        manifest = {"recipe": asdict(recipe), "digest": recipe.digest(), "build_s": seconds}
        (work / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        work.rename(final)
    except BaseException:
        remove_build_dir(work)
        raise
    log.info("image %s built in %.0f s", recipe.digest(), seconds)
    return Image(final)


def _bootstrap(recipe: Recipe, rootfs: Path, pubkey: str) -> None:
    hook = rootfs.with_name("customize.sh")
    hook.write_text(recipe.hook_script(pubkey))
    mirror = debian_mirror()
    log.info("mmdebstrap %s from %s (%d packages)", recipe.distro, mirror, len(recipe.packages))
    run_logged(
        [
            "mmdebstrap", "--variant=apt", "--include=" + ",".join(recipe.packages),
            "--skip=essential/unlink", "--aptopt=APT::Install-Recommends \"false\"",
            f"--customize-hook=sh {hook} \"$1\"",
            recipe.distro, str(rootfs), f"deb {mirror} {recipe.distro} main",
        ],
        "mmdebstrap",
    )  # fmt: skip


def _copy_boot_files(rootfs: Path, image: Image) -> None:
    """Copy the newest kernel and its initrd out of the tree, for qemu's direct boot."""
    kernels = sorted((rootfs / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise LabInputError(f"No kernel was installed into {rootfs}; check the recipe packages.")
    version = kernels[-1].name.removeprefix("vmlinuz-")
    shutil.copyfile(kernels[-1], image.kernel)
    shutil.copyfile(rootfs / "boot" / f"initrd.img-{version}", image.initrd)


def _make_disk(raw: Path, size_mb: int, label: str, content: Path | None, out: Path) -> None:
    """A GPT disk with one ext4 partition (optionally filled from a tree), as qcow2."""
    log.info("making %s disk (%d MiB) %s", label, size_mb, out.name)
    with raw.open("wb") as handle:
        handle.truncate(size_mb * 1024 * 1024)
    run_logged(["sh", "-c", f"echo 'label: gpt\n,,L' | sfdisk -q {raw}"], "sfdisk")
    # The partition runs from 1 MiB to the end less the 33-sector backup GPT; stay below it.
    size_k = size_mb * 1024 - 2 * 1024
    argv = ["mkfs.ext4", "-q", "-F", "-L", label, "-E", f"offset={_PARTITION_OFFSET}"]
    if content is not None:
        argv += ["-d", str(content)]
    run_logged([*argv, str(raw), f"{size_k}k"], "mkfs.ext4")
    run_logged(["qemu-img", "convert", "-O", "qcow2", str(raw), str(out)], "qemu-img")
    raw.unlink()
