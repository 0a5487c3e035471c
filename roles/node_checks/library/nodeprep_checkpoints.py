#!/usr/bin/python
"""Verify the committed checkpoints of one directory the way a resume would, newest first."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule

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
    description: Checkpoint directories (each holding C(ckpt-*) directories).
    type: list
    elements: path
    required: true
"""

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
_NAME = re.compile(r"^ckpt-(\d{10})-(light|full)$")
_CHUNK = 4 << 20


def committed(root: str) -> list[tuple[int, str, str]]:
    """(step, layer, name) newest first; at equal steps the full checkpoint first."""
    found = []
    for name in os.listdir(root):
        match = _NAME.match(name)
        if match and os.path.isdir(os.path.join(root, name)):
            found.append((int(match.group(1)), match.group(2), name))
    found.sort(key=lambda item: (item[0], item[1] == "full"), reverse=True)
    return found


def problem(directory: str, step: int, layer: str) -> str | None:  # noqa: PLR0911
    """Why this checkpoint would be refused, or None when it verifies."""
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as handle:
            manifest = json.load(handle)
        files = {str(n): (int(e["size"]), str(e["sha256"])) for n, e in manifest["files"].items()}
        version, claimed = (
            int(manifest["format_version"]),
            (int(manifest["step"]), manifest["layer"]),
        )
    except FileNotFoundError:
        return f"no {MANIFEST}"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"unreadable manifest ({exc})"
    if version != FORMAT_VERSION:
        return f"format version {version}, expected {FORMAT_VERSION}"
    if claimed != (step, layer):
        return "manifest step/layer do not match the directory name"
    for name, (size, _) in files.items():
        path = os.path.join(directory, name)
        if "/" in name or not os.path.isfile(path):
            return f"file {name} is missing"
        if os.path.getsize(path) != size:
            return f"{name} is {os.path.getsize(path)} bytes, manifest says {size}"
    for name, (_, digest) in files.items():
        if _sha256(os.path.join(directory, name)) != digest:
            return f"{name} sha256 does not match the manifest"
    return None


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def survey(root: str) -> dict[str, object]:
    """Every checkpoint's verdict, the one a full resume would load, and what it passes over."""
    if not os.path.isdir(root):
        return {"root": root, "exists": False, "checkpoints": []}
    rows = []
    for step, layer, name in committed(root):
        reason = problem(os.path.join(root, name), step, layer)
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


def judge(surveys: list[dict[str, object]]) -> dict[str, object]:
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
    verdict: dict[str, object] = {
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
