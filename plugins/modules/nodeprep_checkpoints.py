#!/usr/bin/python
"""Verify the committed checkpoints of one directory the way a resume would, newest first."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

# The checkpoint core's own format rules: the same file as nodeprep.checkpoint.manifest.
from ansible_collections.nodeprep.hardening.plugins.module_utils.checkpoint_manifest import (
    CheckpointInvalidError,
    parse_name,
    verify,
)

DOCUMENTATION = r"""
module: nodeprep_checkpoints
short_description: Check every committed checkpoint's manifest, sizes and sha256.
description:
  - Lists C(ckpt-<step>-<layer>) directories under each root, newest first, and verifies each
    against its C(manifest.json) (format version, name, every file's size and sha256),
    the on-disk format of nodeprep's checkpoint core. Needs no torch, so it runs on any node.
  - Reports which checkpoint a resume would load and which newer ones it would pass over.
  - Judges the result as C(checkpoint.newest) under C(checks) for C(nodeprep_check).
options:
  roots:
    description:
      - Checkpoint directories, each holding C(ckpt-*) directories. A root that does not
        exist is reported as such and does not fail the module.
    type: list
    elements: path
    required: true
notes:
  - Supports check mode; the module only reads.
  - Hashing large checkpoints takes time; give the task a C(timeout).
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Verify every committed checkpoint's manifest and hashes.
  nodeprep.hardening.nodeprep_checkpoints:
    roots:
      - /data/checkpoints
  register: checkpoints
  timeout: 600
  check_mode: false

- name: Report checkpoint.newest.
  nodeprep.hardening.nodeprep_check:
    check: "{{ item.check }}"
    passed: "{{ item.passed }}"
    since: "{{ checkpoints.started }}"
    skip: "{{ item.skip or omit }}"
    detail: "{{ item.detail or item.skip }}"
  loop: "{{ checkpoints.checks }}"
"""

RETURN = r"""
started:
  description: Epoch seconds when the module started, for the I(since) option of nodeprep_check.
  returned: always
  type: float
  sample: 1718000000.123
surveys:
  description: One entry per root, in the order of I(roots).
  returned: always
  type: list
  elements: dict
  contains:
    root:
      description: The root directory as given.
      type: str
    exists:
      description: Whether the root is a directory.
      type: bool
    checkpoints:
      description:
        - Every committed checkpoint, newest step first (at equal steps the full one
          first), each with C(name), C(step), C(layer) (C(light) or C(full)), C(valid) and
          C(problem) (why it does not verify, or an empty string).
      type: list
      elements: dict
    resume_from:
      description:
        - The newest full checkpoint that verifies (an entry of C(checkpoints)), or null
          when none does. Only when the root exists.
      type: dict
    passed_over:
      description:
        - Full checkpoints newer than C(resume_from) that fail verification, which a
          resume would pass over (every failing full one when none verifies). Only when
          the root exists.
      type: list
      elements: dict
  sample:
    - root: /data/checkpoints
      exists: true
      checkpoints:
        - {name: ckpt-0000001200-full, step: 1200, layer: full, valid: true, problem: ""}
      resume_from: {name: ckpt-0000001200-full, step: 1200, layer: full, valid: true, problem: ""}
      passed_over: []
checks:
  description: The verdict of the C(checkpoint.newest) check, as a list of one entry.
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: The check name, C(checkpoint.newest).
      type: str
    passed:
      description: False when the newest checkpoint of any root fails verification.
      type: bool
    detail:
      description: What was found, with the checkpoint a resume would load.
      type: str
    skip:
      description: Why the check does not apply (no committed checkpoint yet), or empty.
      type: str
  sample:
    - check: checkpoint.newest
      passed: true
      detail: /data/checkpoints/ckpt-0000001200-full verifies; a resume loads ckpt-0000001200-full.
      skip: ""
"""


def committed(root: str) -> list[tuple[int, str, str]]:
    """(step, layer, name) newest first; at equal steps the full checkpoint first."""
    found = []
    for name in os.listdir(root):
        parsed = parse_name(name)
        if parsed and os.path.isdir(os.path.join(root, name)):
            found.append((parsed[0], parsed[1], name))
    found.sort(key=lambda item: (item[0], item[1] == "full"), reverse=True)
    return found


def problem(directory: str) -> str | None:
    """Why a resume would refuse this checkpoint, or None when it verifies (the core's verify)."""
    try:
        verify(Path(directory))
    except CheckpointInvalidError as exc:
        reason = str(exc)
        prefix = f"{os.path.basename(directory)}: "
        return reason[len(prefix) :] if reason.startswith(prefix) else reason
    return None


def survey(root: str) -> dict[str, Any]:
    """Every checkpoint's verdict, the one a full resume would load, and what it passes over."""
    if not os.path.isdir(root):
        return {"root": root, "exists": False, "checkpoints": []}
    rows: list[dict[str, Any]] = []
    for step, layer, name in committed(root):
        reason = problem(os.path.join(root, name))
        rows.append(
            {
                "name": name,
                "step": step,
                "layer": layer,
                "valid": reason is None,
                "problem": reason or "",
            }
        )
    full = [r for r in rows if r["layer"] == "full"]
    resume = next((r for r in full if r["valid"]), None)
    passed_over = [
        r for r in full if not r["valid"] and (resume is None or r["step"] > resume["step"])
    ]
    return {
        "root": root,
        "exists": True,
        "checkpoints": rows,
        "resume_from": resume,
        "passed_over": passed_over,
    }


def judge(surveys: list[dict[str, Any]]) -> dict[str, Any]:
    """checkpoint.newest: fails when any directory's newest checkpoint does not verify."""
    bad, good = [], []
    for survey in surveys:
        rows = survey["checkpoints"]
        if not rows:
            continue
        newest, resume = rows[0], survey["resume_from"]
        where = f"{survey['root']}/{newest['name']}"
        if newest["valid"]:
            loads = resume["name"] if resume else "no full checkpoint"
            good.append(f"{where} verifies; a resume loads {loads}.")
            continue
        fallback = (
            f"a resume falls back to {resume['name']} (step {resume['step']})"
            if resume
            else "no full checkpoint verifies, a resume starts from scratch"
        )
        bad.append(
            f"The newest checkpoint {where} fails verification ({newest['problem']}); {fallback}."
        )
    verdict: dict[str, Any] = {
        "check": "checkpoint.newest",
        "passed": not bad,
        "detail": " ".join(bad or good),
        "skip": "",
    }
    if not bad and not good:
        roots = ", ".join(str(s["root"]) for s in surveys)
        verdict["skip"] = f"no committed checkpoint yet in {roots}"
    return verdict


def main() -> None:
    started = time.time()
    module = AnsibleModule(
        argument_spec={"roots": {"type": "list", "elements": "path", "required": True}},
        supports_check_mode=True,
    )
    surveys = [survey(root) for root in module.params["roots"]]
    module.exit_json(changed=False, started=started, surveys=surveys, checks=[judge(surveys)])


if __name__ == "__main__":
    main()
