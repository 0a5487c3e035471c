"""Fixtures shared by every tier."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def local_inventory(tmp_path: Path) -> Path:
    """An inventory whose one host is this machine, reached without SSH."""
    path = tmp_path / "local.ini"
    # heartbeat_cloud=none: this machine's DMI may name a cloud, and the heartbeat role's probe
    # plan would then ask the real metadata address; tests speak only to 127.0.0.1.
    path.write_text(
        f"[nodes]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}"
        " heartbeat_cloud=none\n"
    )
    return path


# `make test` runs the unit and integration tiers on two pytest-xdist workers
# (`-n 2 --dist loadfile`): a file's tests stay on one worker, in file order (module fixtures,
# containers and reference runs are built once). The scheduler below widens a file to its
# group: files that share state beyond their process, or that would overload two cores side by
# side, run on one worker one after the other. (xdist's own `loadgroup` marks tests by
# rewriting item._nodeid, which pytest 9 no longer reads: its groups are silently lost.)
XDIST_GROUPS = {
    # torch jobs (two ranks and a launcher under torchrun, or a trainer beside a heartbeat
    # daemon): never two at once, so that their hang and emergency bounds hold.
    "torch": ("tests/integration/checkpoint/", "tests/integration/job/test_job_local.py",
              "tests/integration/verify/test_interconnect_local.py",
              "tests/integration/heartbeat/test_hb_real_trainer.py"),
    # systemd-nspawn containers booted with --keep-unit land in the caller's cgroup: two at once
    # would share one; the root file system tarball they boot is built once, unlocked.
    "nspawn": ("tests/integration/heartbeat/test_hb_systemd.py",
               "tests/integration/heartbeat/test_hb_verify.py",
               "tests/integration/collection/test_collection.py"),
    # The trainer image: built (or taken from the prefetch) once into one path.
    "image": ("tests/integration/image/",),
    # Role markers under the host's /etc/nodeprep/roles, written and removed.
    "etc-nodeprep": ("tests/integration/test_provision_rolling.py",
                     "tests/integration/volume_grow/test_verify_size.py",
                     "tests/integration/verify/test_verify_preflight.py"),
}  # fmt: skip


def xdist_scope(nodeid: str) -> str:
    """The unit of work a worker takes whole: the test's group, else its file."""
    where = nodeid.split("::", 1)[0]
    return next((name for name, paths in XDIST_GROUPS.items() if where.startswith(paths)), where)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: `-p no:xdist` still runs
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """loadfile widened by XDIST_GROUPS; a bare `-n N` (xdist's `load`) gets it too, since
    spreading one file's tests over workers breaks files that share state between tests."""
    if config.getvalue("dist") not in ("load", "loadfile"):
        return None
    from xdist.scheduler import LoadFileScheduling

    class GroupScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return GroupScheduling(config, log)
