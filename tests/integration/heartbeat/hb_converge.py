"""Running the role into the test container through ansible-playbook."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeprep import paths
from nspawn_node import Container

REPO = Path(__file__).resolve().parents[3]


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

    def __init__(self, box: Container, workdir: Path, defaults: dict[str, Any]) -> None:
        self.box = box
        self.workdir = workdir
        self.defaults = defaults  # what `nodeprep provision` would pass; VARIABLES win
        shim = box.chroot_shim(workdir / "enter-container")
        (workdir / "inventory.ini").write_text(
            f"node ansible_connection=community.general.chroot ansible_host={box.root} "
            f"ansible_chroot_exe={shim} ansible_python_interpreter=/usr/bin/python3\n"
        )

    def __call__(self, variables: dict[str, Any]) -> Converge:
        varfile = self.workdir / "vars.json"
        varfile.write_text(json.dumps({**self.defaults, **variables}))
        env = dict(
            os.environ,
            ANSIBLE_ROLES_PATH=str(REPO / "roles"),
            ANSIBLE_COLLECTIONS_PATH=str(paths.link_collection(self.workdir / "collections")),
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
