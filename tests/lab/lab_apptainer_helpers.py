"""What the apptainer lab test needs on the host: packages served on 127.0.0.1, playbook runs."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeprep import runner
from nodeprep.image import runtime
from nodeprep.image.debs import fetch_debs
from nodeprep.lab.mirror import debian_mirror

REPO = Path(__file__).resolve().parents[2]
PLAY = Path(__file__).with_name("apptainer_play.yml")
# The lab's slirp NICs are restrict=on (no guest-to-host traffic), so the guest reaches the
# host's server through a reverse forward on the Ansible SSH connection, on its own loopback.
GUEST_PORT = 18080


def guest_debs(dpkg_status: str) -> list[Path]:
    """sid's apptainer and the packages this guest lacks for it, cached per guest state."""
    key = hashlib.sha256(dpkg_status.encode()).hexdigest()[:16]
    dest = runtime.cache_dir() / f"guest-debs-{key}"
    found = sorted(dest.glob("*.deb"))
    if any(p.name.startswith("apptainer_") for p in found):
        return found
    status = dest.with_suffix(".status")
    dest.parent.mkdir(parents=True, exist_ok=True)
    status.write_text(dpkg_status)
    return fetch_debs(debian_mirror(), dest, node_status=status)


def forward_to_guest(inventory: Path, port: int) -> None:
    """Let the guest's 127.0.0.1:GUEST_PORT reach the host's 127.0.0.1:PORT over SSH."""
    with inventory.open("a") as handle:  # the last section is the group's [vars]
        handle.write(f"ansible_ssh_extra_args='-R {GUEST_PORT}:127.0.0.1:{port}'\n")


def package_files(debs: list[Path]) -> list[dict[str, str]]:
    return [
        {"url": f"http://127.0.0.1:{GUEST_PORT}/{urllib.parse.quote(deb.name)}",
         "sha256": hashlib.sha256(deb.read_bytes()).hexdigest()}
        for deb in debs
    ]  # fmt: skip


@dataclass
class PlayRun:
    rc: int
    data: dict[str, Any]
    raw: str

    @property
    def changed(self) -> int:
        return sum(int(stats.get("changed", 0)) for stats in self.data["stats"].values())

    def messages(self) -> str:
        """Every failure message of the run, joined."""
        found = []
        for play in self.data.get("plays", []):
            for task in play["tasks"]:
                for result in task["hosts"].values():
                    if result.get("failed"):
                        found.append(str(result.get("msg", "")))
                        found.extend(str(r.get("msg", "")) for r in result.get("results", []))
        return " | ".join(found)

    def checks(self) -> dict[str, dict[str, Any]]:
        """The nodeprep_check results by check name."""
        found = {}
        for play in self.data.get("plays", []):
            for task in play["tasks"]:
                for result in task["hosts"].values():
                    if "nodeprep_check" in result:
                        found[result["nodeprep_check"]["check"]] = result["nodeprep_check"]
        return found


def run_play(inventory: Path, env: dict[str, str], variables: dict[str, Any], tags: str,
             workdir: Path, fast: bool = True) -> PlayRun:  # fmt: skip
    """ansible-playbook on APPTAINER_PLAY, by default under the mitogen strategy (as
    `provision --fast`): one Python per node instead of one per task, ~5x faster under TCG."""
    varfile = workdir / "vars.json"
    varfile.write_text(json.dumps(variables))
    env = dict(
        env,
        ANSIBLE_ROLES_PATH=str(REPO / "roles"),
        ANSIBLE_LIBRARY=str(REPO / "playbooks" / "library"),
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_PIPELINING="1",
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        # As ansible-runner sets it for `nodeprep provision`: mitogen checks host keys itself
        # and ignores the inventory's StrictHostKeyChecking=no for the lab's fresh host keys.
        ANSIBLE_HOST_KEY_CHECKING="False",
        **(runner.mitogen_env() if fast else {}),
    )
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory),
         "-e", f"@{varfile}", "--tags", tags, str(PLAY)],
        capture_output=True, text=True, env=env, timeout=900, check=False, cwd=workdir,
    )  # fmt: skip
    try:
        data = json.loads(done.stdout)
    except ValueError:
        data = {"stats": {}, "plays": []}
    return PlayRun(done.returncode, data, done.stdout[-4000:] + done.stderr[-4000:])


def provision(
    inventory: Path, env: dict[str, str], variables: dict[str, Any], workdir: Path
) -> dict[str, Any]:
    """`nodeprep provision --fast --tags apptainer` with VARIABLES; its --json summary."""
    varfile, summary = workdir / "provision-vars.json", workdir / "provision-summary.json"
    varfile.write_text(json.dumps(variables))
    done = subprocess.run(
        [str(Path(sys.executable).with_name("nodeprep")), "provision", str(inventory), "--fast",
         "--tags", "apptainer", "-e", f"@{varfile}", "--json", str(summary)],
        capture_output=True, text=True, env=env, timeout=900, check=False,
    )  # fmt: skip
    assert summary.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    found: dict[str, Any] = json.loads(summary.read_text())
    found["exit_code"], found["output"] = done.returncode, done.stdout[-3000:]
    return found
