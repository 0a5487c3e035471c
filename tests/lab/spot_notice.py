"""The quick start node's last story: a spot notice reaches a running job as an emergency
checkpoint within 5 s.

The node is an AWS VM only by what the user says (``heartbeat_cloud: aws``; its DMI says
QEMU). A stand-in IMDSv2 (tests/cloud_standin.py, a fake: no AWS account here) serves inside
the VM on a dummy interface at 169.254.169.254, the address the heartbeat asks, so the role's
own plan finds the metadata service and composes its notice probe. `nodeprep run` starts the
reference trainer in the image (before that provision, so that their minutes overlap); once
it steps, the drills run against it (tests/lab/drill_story.py), then a file on the node
posts the notice; the watchdog trips
and signals the trainer, which must commit an emergency checkpoint within 5 s of the notice,
both times read on the node's clock. `nodeprep stop` ends the job; the stand-in and its
interface go.
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

STANDIN = Path(__file__).resolve().parents[1] / "cloud_standin.py"
NOTICE = "/run/nodeprep-spot-notice"
STANDIN_UNIT = "nodeprep-test-imds-standin"
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
    node.sh(f"cat > /tmp/cloud_standin.py <<'NODEPREP_STANDIN'\n{STANDIN.read_text()}"
            "NODEPREP_STANDIN\n")  # fmt: skip
    node.sh("sudo ip link add md0 type dummy && sudo ip addr add 169.254.169.254/32 dev md0 "
            "&& sudo ip link set md0 up")  # fmt: skip
    # A service, not a process left in a login session: the ssh-drop drill ends those.
    node.sh(f"sudo systemd-run --unit={STANDIN_UNIT} python3 /tmp/cloud_standin.py aws "
            f"169.254.169.254 80 {NOTICE}")  # fmt: skip
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
    drills_meet_their_limits_and_leave_the_node_as_it_was(node, inventory, workdir, job, JOB_NAME)

    emergency = f"cat {RUN_DIR}/emergency.jsonl 2>/dev/null; true"
    before = len(node.sh(emergency).splitlines())  # a save on another trip is not this one's
    posted = float(node.sh(f"date +%s.%N && sudo touch {NOTICE}"))  # the clock read first
    saved = _wait_for(node, emergency, lambda t: len(t.splitlines()) > before, 60, 0.2)
    record = json.loads(saved.splitlines()[before])
    notice_to_commit = record["committed_time"] - posted
    figures = {"run_s": round(started - began, 1),
               "provision_s": round(provisioned - started, 1),
               "to_step30_s": round(stepping - provisioned, 1),
               "notice_to_signal_s": round(record["signal_time"] - posted, 3),
               "signal_to_commit_s": round(record["committed_time"] - record["signal_time"], 3),
               "notice_to_commit_s": round(notice_to_commit, 3),
               "step": record["step"]}  # fmt: skip
    print("spot notice:", json.dumps(figures), flush=True)
    node.sh(f"sudo rm -f {NOTICE}")
    _nodeprep(node, workdir, "stop", str(inventory), "--name", JOB_NAME, "--fast",
              "-e", f"@{job}", "--timeout", "240")  # fmt: skip
    node.sh(f"sudo systemctl stop {STANDIN_UNIT}; sudo ip link del md0")
    print(f"spot notice story: {time.monotonic() - began:.0f} s", flush=True)
    assert record["signal"] == "SIGUSR1", record
    assert record["signal_time"] >= posted, figures
    assert notice_to_commit < BOUND_S, figures
