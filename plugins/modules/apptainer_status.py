#!/usr/bin/python
"""Judge Apptainer and the trainer image the apptainer role put on a node, for nodeprep verify."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from ansible_collections.nodeprep.hardening.plugins.module_utils.probe import (
    TIMED_OUT,
    Probe,
    probe,
)
from ansible_collections.nodeprep.hardening.plugins.module_utils.status import begin

DOCUMENTATION = r"""
module: apptainer_status
short_description: Judge Apptainer and its image against the apptainer role's marker.
description:
  - Runs C(apptainer --version), hashes the image the role distributed (sha256) and runs the
    role's check command inside it, then returns three verdicts under C(checks) for
    C(nodeprep_check) - C(apptainer.present), C(apptainer.image_hash) and C(apptainer.runs).
  - Every probe is bounded - C(--version) and the hash by I(timeout_s), the check command by
    the marker's C(check_timeout_s) (through C(timeout)(1)) - and a probe that runs out of
    time fails its check with "timed out after S s".
  - Reads only.
options:
  expect:
    description: What to judge against - the role's marker data (C(image_path),
      C(image_sha256), C(exec_options), C(check_command), C(check_timeout_s)). Without it,
      the module reads the apptainer role's marker from I(marker_dir).
    type: dict
  timeout_s:
    description: Seconds C(apptainer --version) and the image hash may take (verify --timeout).
    type: int
    default: 60
extends_documentation_fragment:
  - nodeprep.hardening.marker
notes:
  - Supports check mode.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Judge Apptainer and the image against the apptainer role's marker.
  nodeprep.hardening.apptainer_status:
    timeout_s: "{{ verify_timeout_s | default(60) }}"
  register: apptainer
  check_mode: false
"""

RETURN = r"""
started:
  description: Epoch seconds when the module started, for the I(since) option of nodeprep_check.
  returned: always
  type: float
checks:
  description: One verdict per check, each with C(check), C(passed), C(detail) and C(skip).
  returned: always
  type: list
  elements: dict
"""

NAMES = ["present", "image_hash", "runs"]
_CHUNK = 4 << 20
NO_IMAGE = "no image was distributed by the apptainer role"
AGAIN = "re-run nodeprep provision to copy the image again"


def sha256_within(path: str, deadline: float) -> str | None:
    """The file's sha256, None when reading it takes past DEADLINE (monotonic seconds)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
            if time.monotonic() > deadline:
                return None
    return digest.hexdigest()


def judge(
    expect: dict[str, Any],
    version: Probe,
    image: tuple[str, str],
    run: Probe | None,
    timeouts: tuple[int, int],
) -> list[dict[str, Any]]:
    """The three verdicts. IMAGE is (state, sha256): state ok, missing or timeout."""
    probe_s, check_s = timeouts
    rc, out, err = version
    if rc == 0:
        present = f"found {out.strip()}"
    elif rc == TIMED_OUT:
        present = f"timed out after {probe_s} s: apptainer --version did not answer"
    else:
        present = (
            f"apptainer --version failed ({err.strip() or 'no output'}); "
            "re-run nodeprep provision with the apptainer role"
        )
    checks: list[dict[str, Any]] = [
        {"check": "apptainer.present", "passed": rc == 0, "detail": present, "skip": ""}
    ]
    path, want = expect.get("image_path") or "", expect.get("image_sha256") or ""
    if not path:
        for name in ("apptainer.image_hash", "apptainer.runs"):
            checks.append({"check": name, "passed": False, "detail": "", "skip": NO_IMAGE})
        return checks
    state, digest = image
    if state == "timeout":
        hashed = f"{path} could not be hashed: timed out after {probe_s} s"
    elif state == "missing":
        hashed = (
            f"{path} is missing, expected {want}; re-run nodeprep provision to copy the image again"
        )
    else:
        hashed = f"{path} has sha256 {digest}, expected {want}" + (
            "" if digest == want else f"; {AGAIN}"
        )
    checks.append(
        {
            "check": "apptainer.image_hash",
            "passed": state == "ok" and digest == want,
            "detail": hashed,
            "skip": "",
        }
    )
    r_rc, _, r_err = run or (1, "", "not run")
    command = expect.get("check_command", "")
    if r_rc == 0:
        ran = f"`{command}` ran in the image"
    elif r_rc == TIMED_OUT:
        ran = f"timed out after {check_s} s: `{command}` did not finish in {path}"
    else:
        ran = (
            f"the check command failed in {path}: {(r_err.strip() or 'no output')[-300:]}; "
            "see apptainer exec output"
        )
    checks.append({"check": "apptainer.runs", "passed": r_rc == 0, "detail": ran, "skip": ""})
    return checks


def main() -> None:
    module, expect, started = begin(
        "apptainer", NAMES, {"timeout_s": {"type": "int", "default": 60}}
    )
    probe_s = int(module.params["timeout_s"])
    check_s = int(expect.get("check_timeout_s") or 300)
    version = probe(module, ["timeout", str(probe_s), "apptainer", "--version"])
    path = expect.get("image_path") or ""
    image, run = ("missing", ""), None
    if path:
        try:
            digest = sha256_within(path, time.monotonic() + probe_s)
            image = ("timeout", "") if digest is None else ("ok", digest)
        except OSError:
            image = ("missing", "")
        argv = ["timeout", str(check_s), "apptainer", "exec"]
        argv += [str(o) for o in expect.get("exec_options") or []]
        run = probe(module, [*argv, path, "sh", "-c", str(expect.get("check_command", "true"))])
    checks = judge(expect, version, image, run, (probe_s, check_s))
    module.exit_json(changed=False, started=started, checks=checks)


if __name__ == "__main__":
    main()
