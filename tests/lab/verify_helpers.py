"""`nodeprep verify` against lab nodes: real checkpoints to check, ways to break a node, the run."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from nodeprep.checkpoint import commit_checkpoint

CKPT = "/data/checkpoints"
NEWEST = f"{CKPT}/ckpt-0000000012-full/m.pt"
# Two host cores under software emulation: sudo can take longer than ansible.cfg's 30 s.
SLOW_NODE_VARS: dict[str, Any] = {"ansible_timeout": 120}
# What the fleet's verify is told about the nodes: the data disk's size and room, the
# checkpoints it ships, and no bond (the fleet story leaves it to the quick start's).
NODE_VARS: dict[str, Any] = {
    **SLOW_NODE_VARS,
    "nic_bond_members": [],
    "node_checks_disk_paths": [{"path": "/data", "min_size_gb": 0.9, "min_free_gb": 0.2}],
    "node_checks_checkpoint_dirs": [CKPT],
}
# The fleet's nodes have no GPU and no torch; apptainer and the bond are not applied there
# (so the interconnect check, which runs in the image, skips too).
SKIPPED = {"gpu.driver", "gpu.count", "gpu.temperature", "gpu.ecc", "gpu.xid", "smoke.drill",
           "apptainer.present", "apptainer.image_hash", "apptainer.runs", "interconnect.allreduce",
           "nic_bond.mode", "nic_bond.miimon", "nic_bond.members_up", "nic_bond.active_member",
           "nic_bond.peer"}  # fmt: skip
# What break_node breaks, by the checks that must fail.
BROKEN = {"heartbeat.service", "heartbeat.watchdog", "heartbeat.metrics", "disk.free",
          "disk.writable", "checkpoint.newest"}  # fmt: skip

Shell = Callable[..., str]


def checkpoint_archive(tmp_path: Path) -> str:
    """Three real checkpoints from the checkpoint core, as a base64 tar.gz for the shell."""
    root = tmp_path / "checkpoints"
    for step in (4, 8, 12):
        commit_checkpoint(root, step, "full", {"m.pt": {"w": torch.full((512,), float(step))}})
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(root, arcname=".")
    return base64.b64encode(buffer.getvalue()).decode()


def ship_checkpoints(sh: Shell, archive: str) -> None:
    """Unpack checkpoint_archive's checkpoints into the node's data disk."""
    sh(f"sudo mkdir -p {CKPT} && echo {archive} | base64 -d | sudo tar xz -C {CKPT}")


def break_node(sh: Shell) -> None:
    """Stop the heartbeat, flip a byte of the newest checkpoint, fill the data disk."""
    sh("sudo systemctl stop nodeprep-heartbeat.service")
    sh(
        "sudo python3 -c \"import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); "
        f"b[len(b)//2]^=255; open(p,'wb').write(b)\" {NEWEST}"
    )
    sh(
        "sudo fallocate -l $(( $(stat -f -c '%a*%S' /data) - 4194304 )) /data/fill && "
        "(sudo dd if=/dev/zero of=/data/fill2 bs=64k 2>/dev/null || true)"
    )


def run_verify(
    inventory: Path, tmp_path: Path, name: str, *args: str, node_vars: dict[str, Any] | None = None
) -> tuple[int, str, dict[str, Any]]:
    """`nodeprep verify` as a user runs it, in its own process; exit code, output, JSON report."""
    out = tmp_path / f"{name}.json"
    variables = tmp_path / "verify-vars.json"
    variables.write_text(json.dumps(NODE_VARS if node_vars is None else node_vars))
    done = subprocess.run(
        [str(Path(sys.executable).with_name("nodeprep")), "verify", str(inventory),
         "-e", f"@{variables}", "--json", str(out), "--junit", str(tmp_path / f"{name}.xml"),
         *args],
        capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    print(done.stdout[-8000:], done.stderr[-2000:])
    return done.returncode, done.stdout, json.loads(out.read_text())


def statuses(report: dict[str, Any], status: str, host: str) -> set[str]:
    return {r["check"] for r in report["results"] if r["status"] == status and r["host"] == host}


def failures(report: dict[str, Any], host: str) -> dict[str, str]:
    """The host's failed checks with their detail, so a failed assertion says why."""
    return {
        r["check"]: r["detail"]
        for r in report["results"]
        if r["status"] == "fail" and r["host"] == host
    }
