"""Lab tier fixtures: one image build and one saved state per session, a fresh node per test.

Each test's node is restored from the saved state (seconds), and torn down in a finalizer
that runs on failure and on Ctrl-C alike; the teardown itself is checked for leftovers.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_helpers import LabNode

from image_testbed import TORCH_IMAGE, apptainer, build_image, torch_wheelhouse
from nodeprep.lab import lifecycle
from nodeprep.lab.accel import choose_accel
from nodeprep.lab.image import Image, ensure_image
from nodeprep.lab.node import Machine
from nodeprep.lab.paths import cache_dir
from nodeprep.lab.recipe import Recipe
from nodeprep.lab.savedstate import ensure_saved_state
from nodeprep.lab.state import LabState, load_state

pytestmark = pytest.mark.lab


@pytest.fixture(scope="session")
def lab_cache() -> Path:
    return cache_dir()


@pytest.fixture(scope="session")
def lab_image(lab_cache: Path) -> Image:
    """The node image, built once per machine (cold: minutes) and cached."""
    return ensure_image(Recipe(), lab_cache)


@pytest.fixture(scope="session")
def saved_state_ready(lab_image: Image, lab_cache: Path) -> str:
    """Make sure the saved state exists, so each test's `up` only restores."""
    machine = Machine(choose_accel(lab_image.kernel))
    ensure_saved_state(lab_image, machine, lab_cache, lifecycle.free_port())
    return machine.accel


@pytest.fixture
def lab_node(tmp_path: Path, lab_cache: Path, saved_state_ready: str) -> Iterator[LabNode]:
    lab_dir = tmp_path / "lab"
    env = {**os.environ, "NODEPREP_LAB_DIR": str(lab_dir), "NODEPREP_CACHE_DIR": str(lab_cache)}
    try:
        state = lifecycle.up(lifecycle.UpRequest(nodes=1), lab_dir, lab_cache)
        yield LabNode(lab_dir, state, env)
    finally:
        recorded = load_state(lab_dir)
        lifecycle.down(lab_dir)
        for node in recorded.nodes if recorded else []:
            _reap(node.pid)


def _reap(pid: int) -> None:
    """qemu started in this process stays a zombie child until collected."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this tier runs against real lab VMs."""
    for item in items:
        if "tests/lab/" in str(item.path):
            item.add_marker(pytest.mark.lab)


@pytest.fixture(scope="session")
def torch_image() -> Path:
    """build-image as the quick start runs it; the image tier's build makes this a skip."""
    wheelhouse, requirement = torch_wheelhouse()
    done = build_image(apptainer(), TORCH_IMAGE, "--wheelhouse", str(wheelhouse), torch=requirement)
    assert done.returncode == 0, done.stdout + done.stderr
    print(done.stdout.strip())
    return TORCH_IMAGE


@pytest.fixture
def fleet(tmp_path: Path, lab_cache: Path, saved_state_ready: str) -> Iterator[LabState]:
    """Two nodes, their bond segments wired together (node.Link), ended even on failure."""
    lab_dir = tmp_path / "lab"
    os.environ["NODEPREP_LAB_DIR"] = str(lab_dir)
    try:
        yield lifecycle.up(lifecycle.UpRequest(nodes=2), lab_dir, lab_cache)
    finally:
        recorded = load_state(lab_dir)
        lifecycle.down(lab_dir)
        for node in recorded.nodes if recorded else []:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(node.pid, os.WNOHANG)
        os.environ.pop("NODEPREP_LAB_DIR", None)
