"""Fixtures for the systemd tier: the wheel, a booted container, converging the role."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nspawn import Container, rootfs_tarball

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "unit" / "heartbeat"))
NEEDED = ("systemd-nspawn", "nsenter", "mmdebstrap")


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout as a wheel, the way an operator would ship it to nodes."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO), "-w", str(out)],
        check=True,
        timeout=300,
    )
    return next(out.glob("nodeprep-*.whl"))


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    missing = [tool for tool in NEEDED if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        pytest.fail(
            f"the systemd tier needs root and {', '.join(NEEDED)}; missing: "
            f"{', '.join(missing) or 'root'} (apt-get install systemd-container mmdebstrap)"
        )
    box = Container.from_tarball(rootfs_tarball(), tmp_path_factory.mktemp("node"))
    try:
        box.boot()
        yield box
    finally:
        box.stop()


@dataclass
class Converge:
    rc: int
    output: str

    @property
    def changed(self) -> int:
        found = re.search(r"changed=(\d+)", self.output)
        assert found, self.output[-3000:]
        return int(found.group(1))


class Converger:
    """Runs converge.yml into the container with a given set of role variables."""

    def __init__(self, box: Container, workdir: Path) -> None:
        self.box = box
        self.workdir = workdir
        shim = box.chroot_shim(workdir / "enter-container")
        (workdir / "inventory.ini").write_text(
            f"node ansible_connection=community.general.chroot ansible_host={box.root} "
            f"ansible_chroot_exe={shim} ansible_python_interpreter=/usr/bin/python3\n"
        )

    def __call__(self, variables: dict[str, Any]) -> Converge:
        varfile = self.workdir / "vars.json"
        varfile.write_text(json.dumps(variables))
        env = dict(
            os.environ,
            ANSIBLE_ROLES_PATH=str(REPO / "roles"),
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_CONFIG=str(self.workdir / "none.cfg"),
            ANSIBLE_FORCE_COLOR="0",
            ANSIBLE_PIPELINING="1",
        )
        run = subprocess.run(
            [
                str(Path(sys.executable).parent / "ansible-playbook"),
                "-i",
                str(self.workdir / "inventory.ini"),
                "-e",
                f"@{varfile}",
                str(Path(__file__).parent / "converge.yml"),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
            cwd=self.workdir,
        )
        return Converge(run.returncode, run.stdout + run.stderr)


@pytest.fixture(scope="module")
def converge(container: Container, tmp_path_factory: pytest.TempPathFactory) -> Converger:
    return Converger(container, tmp_path_factory.mktemp("ansible"))
