"""What a lab test gets from the lab_node fixture: the node and ways to talk to it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from nodeprep.lab.ssh import SshTarget, run_ssh
from nodeprep.lab.state import LabState

# The heartbeat role's default Prometheus textfile on a node (heartbeat_metrics_path).
METRICS = "/var/lib/prometheus/node-exporter/nodeprep_heartbeat.prom"


@dataclass(frozen=True)
class LabNode:
    """A running one-node lab, as a test sees it."""

    lab_dir: Path
    state: LabState
    env: dict[str, str]

    @property
    def target(self) -> SshTarget:
        return SshTarget(self.state.nodes[0].ssh_port, Path(self.state.key))

    def sh(self, command: str, timeout_s: float = 60) -> str:
        """Run a command on the node; fail the test with its stderr when it fails."""
        done = run_ssh(self.target, command, timeout_s=timeout_s)
        assert done.returncode == 0, f"{command!r} failed: {done.stderr}"
        return done.stdout

    def cli(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run `nodeprep lab ARGV...` as a user would, in a separate process."""
        command = [sys.executable, "-m", "nodeprep.cli.lab", *argv]
        return subprocess.run(
            command, capture_output=True, text=True, env=self.env, timeout=300, check=False
        )


def node_sh(state: LabState, name: str, command: str) -> str:
    """COMMAND on node NAME of a running lab; its output, or an assertion naming the failure."""
    node = next(n for n in state.nodes if n.name == name)
    done = run_ssh(SshTarget(node.ssh_port, Path(state.key)), command, timeout_s=120)
    assert done.returncode == 0, f"{name}: {command!r} failed: {done.stderr}"
    return done.stdout


def lab_cli(*argv: str) -> None:
    """`nodeprep lab ARGV...` in this process (the lab named by NODEPREP_LAB_DIR)."""
    from click.testing import CliRunner

    from nodeprep.cli import cli

    done = CliRunner().invoke(cli, ["lab", *argv])
    assert done.exit_code == 0, done.output


def provision_with_image(tmp_path: Path, torch_image: Path, tags: str, *args: str) -> Path:
    """The running lab's inventory, provisioned (--fast) with TAGS and the trainer image
    TORCH_IMAGE (`nodeprep lab apptainer-vars`), as a user runs it; its path."""
    inventory = tmp_path / "fleet.ini"
    lab_cli("inventory", "--output", str(inventory))
    image_vars = tmp_path / "apptainer.json"
    lab_cli("apptainer-vars", str(torch_image), "--output", str(image_vars))
    done = subprocess.run(
        [str(Path(sys.executable).with_name("nodeprep")), "provision", str(inventory), "--fast",
         "--tags", tags, "-e", f"@{image_vars}", *args],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    return inventory
