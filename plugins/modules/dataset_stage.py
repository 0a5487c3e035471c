#!/usr/bin/python
"""Stage data sets onto a node: resumable checksummed downloads, copies proven by sha256, a
manifest per data set and the dataset role's marker."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.nodeprep.hardening.plugins.module_utils.data.download import download
from ansible_collections.nodeprep.hardening.plugins.module_utils.data.errors import DownloadError
from ansible_collections.nodeprep.hardening.plugins.module_utils.data.files import (
    fsync_dir,
    fsync_file,
    hash_file,
    remove_quietly,
)
from ansible_collections.nodeprep.hardening.plugins.module_utils.data.manifest import (
    write_manifest,
)
from ansible_collections.nodeprep.hardening.plugins.module_utils.data.retry import RetryPolicy
from ansible_collections.nodeprep.hardening.plugins.module_utils.data.staging import (
    DEFAULT_ROOTS,
    Dataset,
    StagedFile,
    StagingError,
    extras,
    free_bytes,
    human,
    is_good,
    manifest_of,
    parse_datasets,
    part_bytes,
    recorded,
    remote_size,
)
from ansible_collections.nodeprep.hardening.plugins.module_utils.marker import (
    MARKER_DIR,
    write_marker,
)

DOCUMENTATION = r"""
module: dataset_stage
short_description: Stage data sets onto a node, each file proven by its sha256.
description:
  - Each data set is a directory of its own (I(dest)) holding exactly the files listed. A file
    already there whose manifest entry and size match (or whose bytes hash to the expected
    sha256) is left alone, so a second run transfers nothing.
  - Before any byte is written, the module refuses a I(dest) that holds files the data set does
    not list, and a data set whose missing bytes do not fit in the free space of its
    filesystem (the refusal gives both numbers). Sizes come from C(size), else from one ranged
    request to the server, else from the controller's copy.
  - C(url) files download into C(FILE.part) and resume from the byte they reached (HTTP Range,
    guarded by the server's ETag or Last-Modified) across connection loss and server restarts,
    with retries and backoff up to the I(retry) limits; C(FILE) appears only by an atomic rename
    once its sha256 matches. A mismatch removes the part and names the file, the URL and both
    hashes.
  - C(src) files are copied from the controller by the role (into C(FILE.part), after
    I(state=plan) checked the controller's copy against the expected sha256); this module
    proves each part's sha256 and renames it into place.
  - With I(state=present), writes C(dest/dataset-manifest.json) (every file, size, sha256 and
    one version hash) and records every data set in the dataset role's marker.
options:
  datasets:
    description: The data sets, as the role variable C(datasets) lists them.
    type: list
    elements: dict
    required: true
  state:
    description: C(plan) checks everything and returns which C(src) files to copy (and creates
      their directories); C(present) stages the data sets.
    type: str
    choices: [plan, present]
    default: present
  controller:
    description: For I(state=plan), the controller's view of each C(src) file - the
      C(results) of an C(ansible.builtin.stat) loop over the C(src) paths with
      C(checksum_algorithm=sha256) (each result's C(item) is the path, C(stat) its C(exists),
      C(size) and C(checksum)).
    type: list
    elements: dict
    default: []
  retry:
    description: Download limits - C(max_attempts) (requests in a row bringing no new byte),
      C(max_seconds) (whole budget per file), C(max_delay) (longest wait between attempts),
      C(timeout_s) (per connect and per read).
    type: dict
    default: {}
  allowed_roots:
    description: Every C(dest) must lie inside one of these directories.
    type: list
    elements: str
    default: [/data, /mnt, /srv, /scratch, /opt, /home, /var/lib]
  marker_dir:
    description: Where the dataset role's marker is written.
    type: path
    default: /etc/nodeprep/roles
notes:
  - Supports check mode (nothing is written; C(changed) says whether anything would be).
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Stage the training data.
  nodeprep.hardening.dataset_stage:
    datasets:
      - name: tokens
        dest: /data/tokens
        files:
          - url: https://data.example/tokens/shard-000.bin
            sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
            size: 4294967296
"""

RETURN = r"""
datasets:
  description: Per data set - C(name), C(dest), C(version), C(files), C(bytes), C(fetched)
    (paths transferred by this run), C(transferred_bytes), C(resumes), C(restarts), C(attempts).
  returned: state=present
  type: list
  elements: dict
copies:
  description: For I(state=plan), the C(src) files to copy - C(src) and C(part) (the node path
    the role copies to).
  returned: state=plan
  type: list
  elements: dict
"""


def policy(params: dict[str, Any]) -> RetryPolicy:
    try:
        return RetryPolicy(
            max_attempts=int(params.get("max_attempts", 12)),
            max_seconds=float(params.get("max_seconds", 21600)),
            max_delay=float(params.get("max_delay", 60)),
            timeout_seconds=float(params.get("timeout_s", 30)),
        )
    except (TypeError, ValueError) as exc:
        raise StagingError(f"the dataset role's retry settings are not valid: {exc}") from None


def missing(dataset: Dataset) -> list[StagedFile]:
    """The files dest lacks (or holds wrong), after refusing a dest with unlisted files."""
    unlisted = extras(dataset)
    if unlisted:
        shown = ", ".join(unlisted[:5]) + (
            f" and {len(unlisted) - 5} more" if len(unlisted) > 5 else ""
        )
        raise StagingError(
            f"data set {dataset.name!r}: {dataset.dest} holds files the data set does not list "
            f"({shown}); a data set needs a directory of its own: move them, or list them"
        )
    manifest = recorded(dataset)
    return [staged for staged in dataset.files if not is_good(dataset, staged, manifest)]


def check_space(
    dataset: Dataset, needed: list[StagedFile], controller: dict[str, Any], timeout: float
) -> None:
    """Refuse, before any byte is written, missing bytes that do not fit (both numbers given)."""
    total, unknown = 0, []
    for staged in needed:
        size = staged.size
        if size is None and staged.src is not None:
            size = int((controller.get(staged.src) or {}).get("size") or 0) or None
        if size is None and staged.url is not None:
            size = remote_size(staged.url, timeout)
        if size is None:
            unknown.append(staged.path)
            continue
        total += max(0, size - part_bytes(dataset, staged))
    where, free = free_bytes(dataset.dest)
    if total > free:
        raise StagingError(
            f"data set {dataset.name!r} needs {human(total)} ({total} bytes) more in {where}, "
            f"which has {human(free)} ({free} bytes) free; free space there or choose another dest"
        )


def check_controller(dataset: Dataset, staged: StagedFile, controller: dict[str, Any]) -> None:
    seen = controller.get(str(staged.src)) or {}
    if not seen.get("exists"):
        raise StagingError(
            f"data set {dataset.name!r}: {staged.src} does not exist on the controller "
            f"(src of {staged.path}); fix src or put the file there"
        )
    if seen.get("checksum") != staged.sha256:
        raise StagingError(
            f"data set {dataset.name!r}: {staged.src} on the controller has sha256 "
            f"{seen.get('checksum')} but {staged.sha256} was expected; nothing was copied"
        )


def place(dataset: Dataset, staged: StagedFile) -> None:
    """Prove a copied part and rename it into place (a mismatch removes it)."""
    target = os.path.join(dataset.dest, staged.path)
    part = target + ".part"
    if not os.path.isfile(part):
        raise StagingError(f"data set {dataset.name!r}: {part} was not copied; run again")
    size, sha256 = hash_file(Path(part))
    if sha256 != staged.sha256 or (staged.size is not None and size != staged.size):
        remove_quietly(Path(part))
        raise StagingError(
            f"data set {dataset.name!r}: {staged.path} copied from {staged.src} has sha256 "
            f"{sha256} ({size} bytes) but {staged.sha256} was expected; the copy was removed"
        )
    fsync_file(Path(part))
    os.replace(part, target)
    fsync_dir(Path(os.path.dirname(target)))


def plan(
    module: AnsibleModule, datasets: list[Dataset], controller: dict[str, Any], timeout: float
) -> None:
    copies, made = [], False
    for dataset in datasets:
        needed = missing(dataset)
        for staged in needed:
            if staged.src is not None:
                check_controller(dataset, staged, controller)
        check_space(dataset, needed, controller, timeout)
        for staged in needed:
            if staged.src is None:
                continue
            part = os.path.join(dataset.dest, staged.path + ".part")
            copies.append({"src": staged.src, "part": part, "dataset": dataset.name})
            if not module.check_mode and not os.path.isdir(os.path.dirname(part)):
                os.makedirs(os.path.dirname(part), mode=0o755)
                made = True
    module.exit_json(changed=made, copies=copies)


def stage(module: AnsibleModule, datasets: list[Dataset], retry: RetryPolicy) -> None:
    changed, results = False, []
    for dataset in datasets:
        needed = missing(dataset)
        check_space(dataset, needed, {}, retry.timeout_seconds)
        result: dict[str, Any] = {
            "name": dataset.name, "dest": dataset.dest, "fetched": [],
            "transferred_bytes": 0, "resumes": 0, "restarts": 0, "attempts": 0,
        }  # fmt: skip
        if module.check_mode:
            changed = changed or bool(needed)
            results.append({**result, "fetched": [staged.path for staged in needed]})
            continue
        for staged in needed:
            target = os.path.join(dataset.dest, staged.path)
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            if staged.url is not None:
                try:
                    done = download(
                        staged.url, target, staged.sha256, size=staged.size, policy=retry
                    )
                except DownloadError as exc:
                    raise StagingError(f"data set {dataset.name!r}: {exc}") from None
                for key in ("resumes", "restarts", "attempts"):
                    result[key] += getattr(done, key)
                result["transferred_bytes"] += done.bytes_transferred
            else:
                place(dataset, staged)
            result["fetched"].append(staged.path)
        manifest = manifest_of(dataset)
        before = recorded(dataset)
        if before is None or before.to_json() != manifest.to_json():
            write_manifest(dataset.dest, manifest)
            changed = True
        changed = changed or bool(needed)
        result.update(
            version=manifest.version, files=len(manifest.files), bytes=manifest.total_bytes
        )
        results.append(result)
    if not module.check_mode:
        marker = [{k: r[k] for k in ("name", "dest", "version", "files", "bytes")} for r in results]
        changed = (
            write_marker("dataset", {"datasets": marker}, module.params["marker_dir"]) or changed
        )
    module.exit_json(changed=changed, datasets=results)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "datasets": {"type": "list", "elements": "dict", "required": True},
            "state": {"type": "str", "choices": ["plan", "present"], "default": "present"},
            "controller": {"type": "list", "elements": "dict", "default": []},
            "retry": {"type": "dict", "default": {}},
            "marker_dir": {"type": "path", "default": MARKER_DIR},
            "allowed_roots": {"type": "list", "elements": "str", "default": list(DEFAULT_ROOTS)},
        },
        supports_check_mode=True,
    )
    try:
        datasets = parse_datasets(module.params["datasets"], module.params["allowed_roots"])
        retry = policy(module.params["retry"])
        if module.params["state"] == "plan":
            seen = {str(r.get("item")): r.get("stat") or {} for r in module.params["controller"]}
            plan(module, datasets, seen, retry.timeout_seconds)
        else:
            stage(module, datasets, retry)
    except (StagingError, OSError) as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
