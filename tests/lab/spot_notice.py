"""The quick start node's job story: `nodeprep run` starts a job, `nodeprep drill` drills it
(netem, link, ssh-drop, disk-full, preempt: a spot notice that must reach the job as an
emergency checkpoint within 5 s, then SIGTERM, then the job back; then reboot),
`nodeprep stop` ends it.

The node is an AWS VM only by what the user says (``heartbeat_cloud: aws``; its DMI says
QEMU). `nodeprep lab metadata node1 up` serves the stand-in IMDSv2 (a fake:
nodeprep/lab/cloud_standin.py; no AWS account here) inside the VM at 169.254.169.254, the
address the heartbeat asks, so that the role's own plan finds the metadata service and
composes its notice probe, and the preempt drill finds the stand-in to post its notice.
`nodeprep run` starts the reference trainer in the image before that provision, so that
their minutes overlap. The notice's times are read on the node's clock.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from drill_story import drills_meet_their_limits_and_leave_the_node_as_it_was
from lab_helpers import LabNode

JOB_NAME = "spot"
RUN_DIR = f"/data/nodeprep/jobs/{JOB_NAME}"
BOUND_S = 5.0
# Small and slow enough to leave the 2 vCPUs to the watchdog; a checkpoint every 20 steps.
JOB = {"job_trainer_steps": 100000, "job_trainer_checkpoint_every": 20,
       "job_trainer_model_mb": 0.25, "job_min_free_mb": 256, "ansible_timeout": 120,
       "job_trainer_extra_args": ["--min-step-s", "0.2"]}  # fmt: skip


def _nodeprep(node: LabNode, workdir: Path, *argv: str) -> str:
    done = subprocess.run([str(Path(sys.executable).with_name("nodeprep")), *argv],
                          capture_output=True, text=True, env=node.env, timeout=1200,
                          check=False, cwd=workdir)  # fmt: skip
    out = done.stdout[-5000:] + done.stderr[-3000:]
    print(f"$ nodeprep {' '.join(argv[:2])} ... ({done.returncode})\n{out}", flush=True)
    assert done.returncode == 0, out
    return out


def _wait_for(node: LabNode, command: str, seen: Any, limit_s: float, poll_s: float) -> str:
    deadline = time.monotonic() + limit_s
    while True:
        text = node.sh(command)
        if seen(text):
            return text
        assert time.monotonic() < deadline, (command, node.sh(f"tail -40 {RUN_DIR}/train.log"))
        time.sleep(poll_s)


def spot_notice_gets_an_emergency_checkpoint(
    node: LabNode, inventory: Path, image_vars: dict[str, Any], workdir: Path
) -> None:
    began = time.monotonic()
    served = node.cli("metadata", "node1", "up")
    assert served.returncode == 0, served.stderr
    # The job first: its torch start-up inside the image (about two minutes under emulation)
    # overlaps the heartbeat's provision; the restarted daemon finds the trainer registered.
    job = workdir / "spot-job.json"
    job.write_text(json.dumps(JOB))
    _nodeprep(node, workdir, "run", str(inventory), "--name", JOB_NAME, "--fast", "-e", f"@{job}")
    started = time.monotonic()
    variables = workdir / "spot-vars.json"
    variables.write_text(json.dumps({**image_vars, "heartbeat_cloud": "aws"}))
    _nodeprep(node, workdir, "provision", str(inventory), "--fast", "--tags", "heartbeat",
              "-e", f"@{variables}")  # fmt: skip
    marker = json.loads(node.sh("cat /etc/nodeprep/roles/heartbeat.json"))
    assert "cloud-notice" in marker["probes"], marker
    provisioned = time.monotonic()
    _wait_for(node, f"cat {RUN_DIR}/train.log 2>/dev/null; true", lambda t: "step 30 " in t,
              600, 2)  # fmt: skip
    stepping = time.monotonic()
    preempt = drills_meet_their_limits_and_leave_the_node_as_it_was(
        node, inventory, workdir, job, JOB_NAME
    )
    notice_to_commit = preempt["detect_s"] + preempt["checkpoint_s"]
    figures = {"run_s": round(started - began, 1),
               "provision_s": round(provisioned - started, 1),
               "to_step30_s": round(stepping - provisioned, 1),
               "notice_to_signal_s": preempt["detect_s"],
               "signal_to_commit_s": preempt["checkpoint_s"],
               "notice_to_commit_s": round(notice_to_commit, 3),
               "steps_lost": preempt["steps_lost"],
               "next_step_s": preempt["next_step_s"]}  # fmt: skip
    print("spot notice:", json.dumps(figures), flush=True)
    _nodeprep(node, workdir, "stop", str(inventory), "--name", JOB_NAME, "--fast",
              "-e", f"@{job}", "--timeout", "240")  # fmt: skip
    removed = node.cli("metadata", "node1", "down")
    assert removed.returncode == 0, removed.stderr
    assert "npmeta0" not in node.sh("ip -br link")
    print(f"job story: {time.monotonic() - began:.0f} s", flush=True)
    assert notice_to_commit < BOUND_S, figures
