"""An installed nodeprep finds its playbooks and roles outside the checkout."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from nodeprep import paths

REPO = Path(__file__).resolve().parents[2]


def test_checkout_data_dir_holds_the_ansible_content() -> None:
    assert (paths.data_dir() / "playbooks" / "provision.yml").is_file()
    assert (paths.roles_dir() / "preflight" / "tasks" / "main.yml").is_file()
    assert paths.ansible_cfg().is_file()
    assert (paths.data_dir() / "galaxy.yml").is_file()


def test_the_run_loads_this_copy_of_the_collection(tmp_path: Path) -> None:
    into = paths.link_collection(tmp_path / "collections")
    root = into / "ansible_collections" / paths.COLLECTION_NAMESPACE / paths.COLLECTION_NAME
    assert (root / "plugins" / "modules" / "nodeprep_check.py").is_file()
    assert root.resolve() == paths.data_dir().resolve()
    assert paths.link_collection(tmp_path / "collections") == into  # a second call is a no-op


@pytest.mark.timeout(300)
def test_wheel_carries_playbooks_roles_and_config(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(REPO)],
        check=True,
    )
    (wheel,) = tmp_path.glob("nodeprep-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "nodeprep/_data/playbooks/provision.yml",
        "nodeprep/_data/roles/preflight/tasks/main.yml",
        "nodeprep/_data/roles/preflight/meta/argument_specs.yml",
        "nodeprep/_data/ansible.cfg",
        "nodeprep/_data/galaxy.yml",
        "nodeprep/_data/meta/runtime.yml",
        "nodeprep/_data/plugins/modules/nodeprep_check.py",
        "nodeprep/_data/plugins/action/nodeprep_check.py",
        "nodeprep/cli/__init__.py",
        "nodeprep/contract.py",
    ):
        assert required in names, required
