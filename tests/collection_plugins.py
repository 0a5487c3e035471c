"""Import the collection's Ansible modules as plain Python, to test their decision logic."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from nodeprep import paths

REPO = Path(__file__).resolve().parents[1]
LIBRARY = REPO / "plugins" / "modules"
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
