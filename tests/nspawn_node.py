"""A booted systemd container for service tests and native builds, run by systemd-nspawn.

Why nspawn: the test machine's PID 1 is not systemd, and ``systemd-nspawn --register=no
--keep-unit -b`` boots a real systemd as the container's PID 1 in about a second without
machined or a host systemd. Commands run inside through ``nsenter`` into the container's
namespaces, which is also how Ansible reaches it (the chroot connection with an nsenter
shim as its ``chroot_exe``). The network namespace is the host's, so the daemon inside
can probe endpoints the test serves on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PACKAGES = ("systemd-sysv", "dbus", "python3", "python3-venv", "python3-apt")
CACHE = Path.home() / ".cache" / "nodeprep" / "heartbeat"
NEEDED = ("systemd-nspawn", "nsenter", "mmdebstrap")


def missing_tools() -> str | None:
    """Why no container can boot on this machine, in one sentence; None when one can."""
    missing = [tool for tool in NEEDED if shutil.which(tool) is None]
    if not missing and os.geteuid() == 0:
        return None
    return (
        f"booted test containers need root and {', '.join(NEEDED)}; missing: "
        f"{', '.join(missing) or 'root'} (apt-get install systemd-container mmdebstrap)"
    )


def _host_suite_and_mirror() -> tuple[str, str]:
    release = Path("/etc/os-release").read_text()
    match = re.search(r"^VERSION_CODENAME=(\S+)", release, re.M)
    suite = match.group(1) if match else "bookworm"
    mirror = "http://deb.debian.org/debian"
    for source in sorted(Path("/etc/apt").glob("sources.list*")) + sorted(
        Path("/etc/apt/sources.list.d").glob("*")
    ):
        if not source.is_file():
            continue
        found = re.search(
            r"(?:^deb\s+(?:\[[^]]*\]\s+)?|^URIs:\s*)(\S+/debian)\s*$", source.read_text(), re.M
        )
        if found:
            mirror = found.group(1)
            break
    return suite, mirror


def rootfs_tarball(suite: str | None = None, extra: tuple[str, ...] = ()) -> Path:
    """Build (once, cached by content) a minimal Debian rootfs with systemd and python3.

    The suite is the host's unless named: a node of another release (the lab VM's, say) can
    run natively in a container of that release. ``extra`` names packages beyond the base.
    """
    host_suite, mirror = _host_suite_and_mirror()
    suite = suite or host_suite
    key = hashlib.sha256(f"{suite} {mirror} {' '.join(PACKAGES + extra)}".encode()).hexdigest()[:16]
    tarball = CACHE / f"rootfs-{suite}-{key}.tar"
    if tarball.exists():
        return tarball
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_suffix(".partial.tar")  # the .tar suffix selects the format
    subprocess.run(
        [
            "mmdebstrap",
            "--variant=apt",
            "--skip=essential/unlink",
            f"--include={','.join(PACKAGES + extra)}",
            '--customize-hook=echo hbnode > "$1/etc/hostname"',
            '--customize-hook=chroot "$1" systemctl mask apt-daily.timer apt-daily-upgrade.timer '
            "e2scrub_all.timer fstrim.timer",
            suite,
            str(partial),
            mirror,
        ],
        check=True,
        timeout=900,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    partial.rename(tarball)
    return tarball


def _runs_systemd(pid: int) -> bool:
    """The container's PID 1 once it has exec'd systemd.

    nspawn's first child is a short-lived helper that forks the real one and exits; under
    load it is the one seen first, and entering its namespaces fails once it is gone.
    """
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "systemd"
    except OSError:
        return False


class Container:
    """One booted container; ``stop()`` always ends it and removes its root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc: subprocess.Popen[bytes] | None = None
        self.leader = 0
        self.log = root.parent / "nspawn.log"

    @classmethod
    def from_tarball(cls, tarball: Path, workdir: Path) -> Container:
        root = workdir / "root"
        root.mkdir(parents=True)
        subprocess.run(["tar", "-C", str(root), "-xf", str(tarball)], check=True, timeout=300)
        return cls(root)

    def boot(self, timeout: float = 60) -> None:
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    "systemd-nspawn",
                    "--register=no",
                    "--keep-unit",
                    "--console=passive",
                    "-q",
                    "-b",
                    "-D",
                    str(self.root),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        while not self.leader and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited: {self.log.read_text()[-2000:]}")
            text = children.read_text().split() if children.exists() else []
            self.leader = next((int(pid) for pid in text if _runs_systemd(int(pid))), 0)
            time.sleep(0.05)
        state = ""
        while state not in ("running", "degraded") and time.monotonic() < deadline:
            # "offline" until the container's systemd has its private bus up
            run = self.sh("systemctl is-system-running --wait", check=False, timeout=timeout)
            state = run.stdout.strip()
            time.sleep(0.2)
        if state not in ("running", "degraded"):
            raise RuntimeError(f"container did not boot (state {state!r}); see {self.log}")

    def sh(
        self, command: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell command inside the container."""
        return subprocess.run(
            ["nsenter", "-t", str(self.leader), "-a", "--", "/bin/sh", "-c", command],
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def chroot_shim(self, path: Path) -> Path:
        """An ``ansible_chroot_exe`` that enters this container instead of chrooting."""
        path.write_text(f'#!/bin/sh\nshift\nexec nsenter -t {self.leader} -a -- "$@"\n')
        path.chmod(0o755)
        return path

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # nspawn asks the container's systemd to halt
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def booted(workdir: Path) -> Iterator[Container]:
    """A container of the host's suite, booted in WORKDIR; stopped even when the test fails."""
    why = missing_tools()
    if why:
        raise RuntimeError(why)
    box = Container.from_tarball(rootfs_tarball(), workdir)
    try:
        box.boot()
        yield box
    finally:
        box.stop()
