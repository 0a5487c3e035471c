"""Fixtures for the systemd tier: the wheel, a booted container, converging the role."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hb_converge import REPO, Converger

from nodeprep import wheel as wheels
from nspawn_node import Container, booted

sys.path.insert(0, str(REPO / "tests" / "unit" / "heartbeat"))


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout as a wheel, the way an operator would ship it to nodes."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO), "-w", str(out)],
        check=True,
        timeout=300,
    )
    return next(out.glob("nodeprep-*.whl"))


@pytest.fixture(scope="session")
def metrics_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """prometheus-client at this controller's version, as `nodeprep provision` ships it."""
    out = tmp_path_factory.mktemp("deps")
    return wheels.dependency_wheel("prometheus-client", out, "nodeprep_prometheus_wheel")


@pytest.fixture(scope="session")
def nvml_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nvidia-ml-py from the package index, to be installed on the node offline."""
    out = tmp_path_factory.mktemp("nvml")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "nvidia-ml-py>=12",
            "-d",
            str(out),
        ],
        check=True,
        timeout=300,
    )
    return next(out.glob("nvidia_ml_py-*.whl"))


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    with booted(tmp_path_factory.mktemp("node")) as box:
        yield box


@pytest.fixture(scope="module")
def converge(
    container: Container, tmp_path_factory: pytest.TempPathFactory, metrics_wheel: Path
) -> Converger:
    # heartbeat_cloud none: the container sees this machine's DMI, which on a cloud CI host
    # would send the probe plan to the real metadata address; tests that compose probes for
    # a cloud name one and point heartbeat_metadata_url at a stand-in on 127.0.0.1.
    defaults = {"nodeprep_prometheus_wheel": str(metrics_wheel), "heartbeat_cloud": "none"}
    return Converger(container, tmp_path_factory.mktemp("ansible"), defaults)
