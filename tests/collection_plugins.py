"""Import the collection's Ansible modules as plain Python, to test their decision logic."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from nodeprep import paths

REPO = Path(__file__).resolve().parents[1]
LIBRARY = REPO / "plugins" / "modules"
MODULE_UTILS = "ansible_collections.nodeprep.hardening.plugins.module_utils"
# The modules import the collection's module_utils as Ansible does on a node:
# ansible_collections.nodeprep.hardening.plugins.module_utils.* (a namespace package).
_COLLECTIONS = str(paths.link_collection(REPO / ".ansible" / "collections"))
if _COLLECTIONS not in sys.path:
    sys.path.append(_COLLECTIONS)


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"plugin_{name}", LIBRARY / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # ansible.module_utils.basic replaces sys.intern on import; torch's compiler (used by
    # the checkpoint tests in the same process) rejects the replacement, so put it back.
    original_intern = sys.intern
    try:
        spec.loader.exec_module(module)
    finally:
        sys.intern = original_intern
    return module


def run_module(name: str, params: dict[str, Any], workdir: Path) -> tuple[int, dict[str, Any]]:
    """Module NAME run as Ansible runs it on a node: a process given its arguments file in
    WORKDIR; its exit status and the JSON it answered."""
    args = workdir / f"{name}-args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, str(LIBRARY / f"{name}.py"), str(args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    try:
        answered: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        raise AssertionError(f"{name} did not answer JSON: {done.stdout}{done.stderr}") from None
    return done.returncode, answered


def module_utils(name: str) -> ModuleType:
    """The collection's module_utils NAME, imported as a module on a node imports it."""
    return importlib.import_module(f"{MODULE_UTILS}.{name}")
