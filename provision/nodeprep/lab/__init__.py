"""The lab: disposable Debian VMs under qemu, the default target and the role test bed.

Roles that bond NICs or grow disks need a kernel of their own; containers here share a
host kernel without bonding or netem, so the lab boots real VMs from a locally built image.
"""

from __future__ import annotations

from nodeprep.lab.errors import LabError, LabInputError

__all__ = ["LabError", "LabInputError"]
