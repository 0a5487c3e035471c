"""The options every nodeprep *_status module shares: where the role's applied marker is."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  marker_dir:
    description:
      - The directory holding the roles' applied markers (C(<marker_dir>/<role>.json)).
      - Unless told what to judge against, the module reads its role's marker there.
        Absent, every check skips (the role was not applied); unreadable or corrupt, every
        check fails and says which, with the command that rewrites it.
    type: path
    default: /etc/nodeprep/roles
"""
