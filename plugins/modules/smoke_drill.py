#!/usr/bin/python
"""Run the kill-and-resume smoke drill on a node for nodeprep verify: smoke.drill."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.nodeprep.hardening.plugins.module_utils.marker import (
    CORRUPT,
    MARKER_DIR,
    UNREADABLE,
    read_marker,
)
from ansible_collections.nodeprep.hardening.plugins.module_utils.probe import TIMED_OUT, probe

DOCUMENTATION = r"""
module: smoke_drill
short_description: Train, SIGKILL, resume and compare bit for bit, on a node.
description:
  - Runs C(python -m nodeprep.smoke) - the reference trainer trains, is killed with SIGKILL
    at a random step after its first checkpoint, resumes, and its final state hash is
    compared with an uninterrupted run's - and returns the verdict C(smoke.drill) under
    C(checks) for C(nodeprep_check).
  - Where it runs - without I(launcher), inside the image the apptainer role recorded in
    its applied marker (C(apptainer exec) with the recorded options), or with I(python) on
    the node when that role was not applied. An unreadable or corrupt apptainer marker fails
    the check rather than guess.
  - When the chosen Python cannot import torch and nodeprep, the check skips and says what
    it saw and how to fix it.
  - The drill works in a fresh directory under I(work_parent), removed before the module
    returns. With I(keep_checkpoints), a passing drill's checkpoints (those of the run that
    was killed and resumed) replace that directory's content, so C(checkpoint.newest) can
    verify real checkpoints of this node. Nothing else on the node changes.
  - With I(drill=heartbeat), the disruptive drill of C(nodeprep verify --drill) instead - a
    private heartbeat daemon watches a probe target that the drill stops under a running
    trainer, and the trainer must write its emergency checkpoint - reported as
    C(drill.heartbeat); it runs with I(python) (or I(launcher)), never the recorded image.
options:
  drill:
    description: Which drill - C(kill) (kill and resume, C(smoke.drill)) or C(heartbeat)
      (C(drill.heartbeat)).
    type: str
    choices: [kill, heartbeat]
    default: kill
  launcher:
    description: Command prefix that runs C(python3) inside the trainer image. Empty - the
      image the apptainer role recorded, else none.
    type: str
    default: ""
  python:
    description: The Python that runs the drill and the trainer when there is no launcher.
    type: str
    default: python3
  steps:
    description: Trainer steps of each run.
    type: int
    default: 24
  checkpoint_every:
    description: Steps between checkpoints.
    type: int
    default: 4
  seed:
    description: The trainer's seed.
    type: int
    default: 0
  model_mb:
    description: Size of the drill's model, in MiB.
    type: float
    default: 0.25
  kill_step:
    description: Kill after this step; 0 picks a random step after the first checkpoint.
    type: int
    default: 0
  work_parent:
    description: Directory the drill's temporary work directory is made in.
    type: path
    default: /var/tmp
  keep_checkpoints:
    description: Directory that receives the checkpoints of a passing drill, replacing what a
      previous drill left there (copied beside it, then renamed into place). Empty - none kept.
    type: path
    default: ""
  data:
    description:
      - A data set staged on the node (the dataset role's I(dest)) for the kill drill's
        trainer runs to train on (the trainer's C(--data)), through the real loader path.
        Inside the image the apptainer role recorded, it is bound read-only at the same path;
        a given I(launcher) must make it visible itself. Empty - synthetic data.
    type: path
    default: ""
  workers:
    description: Loader worker processes over I(data) (the trainer's C(--workers)).
    type: int
    default: 0
  timeout_s:
    description: Seconds the import check, and then the whole drill, may each take; past it
      the check fails as "timed out after S s".
    type: int
    default: 600
extends_documentation_fragment:
  - nodeprep.hardening.marker
notes:
  - Supports check mode (outside its own work directory the drill only reads the node, but
    for I(keep_checkpoints)).
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Run the smoke drill in the image the apptainer role put on the node.
  nodeprep.hardening.smoke_drill:
    timeout_s: 600
  register: smoke
  check_mode: false

- name: Run it outside any image, with a Python that has nodeprep[trainer].
  nodeprep.hardening.smoke_drill:
    python: /opt/nodeprep/venv/bin/python
  register: smoke
  check_mode: false
"""

RETURN = r"""
started:
  description: Epoch seconds when the drill started, for the I(since) option of nodeprep_check.
  returned: always
  type: float
kept:
  description: The directory that now holds the drill's checkpoints; empty when none were kept.
  returned: always
  type: str
checks:
  description: The verdict C(smoke.drill), a list of one, with C(check), C(passed), C(detail)
    and C(skip).
  returned: always
  type: list
  elements: dict
"""

IMPORTS = "import torch, nodeprep.trainer, nodeprep.smoke"
HEARTBEAT_IMPORTS = IMPORTS + ", nodeprep.heartbeat"
CHECKS = {"kill": "smoke.drill", "heartbeat": "drill.heartbeat"}
OUTSIDE = "ran outside any image: role apptainer not applied"


def verdict(
    passed: bool, detail: str, skip: str = "", check: str = "smoke.drill"
) -> list[dict[str, Any]]:
    return [{"check": check, "passed": passed, "detail": detail, "skip": skip}]


def choose_launcher(given: str, marker_dir: str) -> tuple[list[str], str]:
    """The launcher's argv and, when the apptainer marker cannot be trusted, its problem."""
    if given:
        return shlex.split(given), ""
    found = read_marker("apptainer", marker_dir)
    if found["state"] in (UNREADABLE, CORRUPT):
        return [], str(found["problem"])
    image = found["data"].get("image_path") or ""
    if not image:
        return [], ""
    options = [str(o) for o in found["data"].get("exec_options") or []]
    return ["apptainer", "exec", *options, str(image)], ""


def bind_read_only(launcher: list[str], directory: str) -> list[str]:
    """The image's launcher (``apptainer exec OPTIONS IMAGE``) with DIRECTORY bound read-only
    at the same path, so the trainer inside sees the data set staged on the node."""
    return [*launcher[:-1], "--bind", f"{directory}:{directory}:ro", launcher[-1]]


def drill_args(p: dict[str, Any]) -> list[str]:
    """The arguments of ``python -m nodeprep.smoke`` that choose the drill and its runs."""
    if p["drill"] == "heartbeat":
        return ["--heartbeat"]
    args = ["--steps", str(p["steps"]), "--checkpoint-every", str(p["checkpoint_every"]),
            "--seed", str(p["seed"]), "--model-mb", str(p["model_mb"])]  # fmt: skip
    if p["kill_step"] > 0:
        args += ["--kill-step", str(p["kill_step"])]
    if p["data"]:
        args += ["--data", p["data"], "--workers", str(p["workers"])]
    return args


def last_json(text: str) -> dict[str, Any] | None:
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        value = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def judge_run(
    rc: int, out: str, err: str, timeout_s: int, check: str = "smoke.drill"
) -> list[dict[str, Any]]:
    if rc == TIMED_OUT:
        return verdict(False, f"timed out after {timeout_s} s: the drill did not finish", "", check)
    result = last_json(out)
    if rc not in (0, 1) or result is None:
        said = (err.strip() or out.strip() or "no output")[-400:]
        return verdict(False, f"the drill broke (exit {rc}): {said}", "", check)
    if check != "smoke.drill":
        return verdict(bool(result.get("passed")) and rc == 0, str(result.get("detail", "")), "",
                       check)  # fmt: skip
    where = (
        "" if result.get("inside_image") else "; ran outside any image: role apptainer not applied"
    )
    detail = f"{result.get('detail', '')} ({result.get('seconds', '?')} s{where})"
    return verdict(bool(result.get("passed")) and rc == 0, detail)


def keep(source: str, dest: str) -> None:
    """Replace DEST with a copy of SOURCE: copied beside it, then renamed into place."""
    parent = os.path.dirname(dest.rstrip("/")) or "/"
    os.makedirs(parent, exist_ok=True)
    fresh = tempfile.mkdtemp(prefix=".nodeprep-smoke-keep-", dir=parent)
    try:
        shutil.copytree(source, os.path.join(fresh, "checkpoints"))
        old = os.path.join(fresh, "old")
        if os.path.lexists(dest):
            os.rename(dest, old)
        os.rename(os.path.join(fresh, "checkpoints"), dest)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "drill": {"type": "str", "default": "kill", "choices": ["kill", "heartbeat"]},
            "launcher": {"type": "str", "default": ""},
            "python": {"type": "str", "default": "python3"},
            "steps": {"type": "int", "default": 24},
            "checkpoint_every": {"type": "int", "default": 4},
            "seed": {"type": "int", "default": 0},
            "model_mb": {"type": "float", "default": 0.25},
            "kill_step": {"type": "int", "default": 0},
            "work_parent": {"type": "path", "default": "/var/tmp"},
            "timeout_s": {"type": "int", "default": 600},
            "keep_checkpoints": {"type": "path", "default": ""},
            "data": {"type": "path", "default": ""},
            "workers": {"type": "int", "default": 0},
            "marker_dir": {"type": "path", "default": MARKER_DIR},
        },
        supports_check_mode=True,
    )
    p = module.params
    started, timeout_s = time.time(), int(p["timeout_s"])
    check = CHECKS[p["drill"]]
    if p["drill"] == "kill":
        launcher, problem = choose_launcher(p["launcher"], p["marker_dir"])
    else:
        launcher, problem = shlex.split(p["launcher"]), ""
    if p["drill"] == "kill" and p["data"] and not os.path.isdir(p["data"]):
        problem = (
            f"smoke_data {p['data']} is not a directory on this node: stage the data set "
            "(the dataset role) first, or leave smoke_data empty"
        )
    if p["data"] and not p["launcher"] and launcher:
        launcher = bind_read_only(launcher, p["data"])
    if problem:
        module.exit_json(
            changed=False, started=started, kept="", checks=verdict(False, problem, "", check)
        )
        return
    python = "python3" if launcher else str(p["python"])
    bound = ["timeout", str(timeout_s)]
    imports = IMPORTS if p["drill"] == "kill" else HEARTBEAT_IMPORTS
    rc, _, err = probe(module, [*bound, *launcher, python, "-c", imports])
    if rc != 0:
        said = (err.strip().splitlines() or ["no output"])[-1]
        if rc == TIMED_OUT:
            said = f"timed out after {timeout_s} s"
        where = " ".join(launcher) or python
        skip = (
            f"the trainer cannot run on this node: {where} cannot import torch and nodeprep "
            f"({said}); apply the apptainer role or set smoke_python to a Python with "
            "nodeprep[trainer]"
        )
        module.exit_json(
            changed=False, started=started, kept="", checks=verdict(False, "", skip, check)
        )
        return
    work = tempfile.mkdtemp(prefix="nodeprep-smoke-", dir=p["work_parent"])
    kept = ""
    try:
        started = time.time()
        argv = [*bound, *launcher, python, "-m", "nodeprep.smoke", "--work-dir", work,
                "--deadline-s", str(max(timeout_s - 10, 1)), *drill_args(p)]  # fmt: skip
        rc, out, err = probe(module, argv)
        checks = judge_run(rc, out, err, timeout_s, check)
        if checks[0]["passed"] and p["keep_checkpoints"] and p["drill"] == "kill":
            try:
                keep(os.path.join(work, "drill", "checkpoints"), p["keep_checkpoints"])
                kept = p["keep_checkpoints"]
            except OSError as exc:
                checks = verdict(
                    False,
                    f"{checks[0]['detail']}; but its checkpoints could not be kept in "
                    f"{p['keep_checkpoints']}: {exc}",
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    module.exit_json(changed=bool(kept), started=started, kept=kept, checks=checks)


if __name__ == "__main__":
    main()
