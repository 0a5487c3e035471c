"""The repository root is the nodeprep.hardening collection: built, installed, used from outside.

Real ``ansible-galaxy collection build`` and ``install`` into a temporary collections path,
then a playbook that lives outside the repository runs two of the collection's roles and one
of its modules by FQCN against a booted systemd container (no roles path, no library path:
only the installed collection). A second test reads every module's documentation through
``ansible-doc``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeprep import paths
from nspawn_node import Container, booted

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
FQCN = f"{paths.COLLECTION_NAMESPACE}.{paths.COLLECTION_NAME}"
MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py"))

OUTSIDE_PLAYBOOK = f"""\
- name: Use {FQCN} from an installed collection
  hosts: node
  gather_facts: false
  roles:
    - role: {FQCN}.preflight
      vars:
        preflight_min_free_gb: 0
        preflight_time_sync_required: false
  tasks:
    - name: Measure a directory through the module's FQCN.
      {FQCN}.nodeprep_disk:
        paths: [{{path: /var/tmp}}]
      register: disk

    - name: Check the same directory with the node_checks role.
      ansible.builtin.include_role:
        name: {FQCN}.node_checks
        tasks_from: verify
      vars:
        verify_groups: [disk]
        node_checks_disk_paths: [{{path: /var/tmp}}]
"""


def _env(collections: Path, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("ANSIBLE_")  # nothing of the caller's Ansible setup leaks in
    }
    empty_cfg = collections.parent / "empty.cfg"  # not the repository's ansible.cfg
    empty_cfg.write_text("[defaults]\n")
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_CONFIG=str(empty_cfg),
        ANSIBLE_NOCOLOR="1",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        **extra,
    )
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the built tarball, a collections path with it installed)."""
    out = tmp_path_factory.mktemp("galaxy")
    build = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), str(REPO)],
        capture_output=True, text=True, timeout=300, check=False, cwd=out,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr
    (tarball,) = out.glob(f"{paths.COLLECTION_NAMESPACE}-{paths.COLLECTION_NAME}-*.tar.gz")
    collections = out / "collections"
    install = subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "install", "--no-deps", "--offline",
         "-p", str(collections), str(tarball)],
        capture_output=True, text=True, timeout=300, check=False, cwd=out,
        env=_env(collections),
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    return tarball, collections


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    with booted(tmp_path_factory.mktemp("node")) as box:
        yield box


def test_the_tarball_holds_the_collection_and_not_the_python_package(
    installed: tuple[Path, Path],
) -> None:
    tarball, _ = installed
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    for required in (
        "MANIFEST.json", "meta/runtime.yml", "playbooks/provision.yml",
        "roles/heartbeat/tasks/main.yml", "plugins/action/nodeprep_check.py",
        *(f"plugins/modules/{name}.py" for name in MODULES),
    ):  # fmt: skip
        assert required in names, required
    for left_out in ("provision", "tests", "benchmarks", "pyproject.toml", ".venv"):
        assert not any(n == left_out or n.startswith(left_out + "/") for n in names), left_out


def test_a_playbook_outside_the_repository_uses_roles_and_a_module_by_fqcn(
    installed: tuple[Path, Path], container: Container, tmp_path: Path
) -> None:
    _, collections = installed
    shim = container.chroot_shim(tmp_path / "enter-container")
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        f"node ansible_connection=community.general.chroot ansible_host={container.root} "
        f"ansible_chroot_exe={shim} ansible_python_interpreter=/usr/bin/python3\n"
    )
    book = tmp_path / "site.yml"
    book.write_text(OUTSIDE_PLAYBOOK)
    run = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(book)],
        capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
        env=_env(collections, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json"),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    tasks = [
        (task["task"]["name"], task["hosts"]["node"])
        for play in json.loads(run.stdout)["plays"]
        for task in play["tasks"]
        if "node" in task["hosts"]
    ]
    results = [result for _, result in tasks]
    # The module, called by its FQCN from the playbook, ran on the node and judged the directory.
    (disk,) = [r for name, r in tasks if name == "Measure a directory through the module's FQCN."]
    assert {c["check"] for c in disk["checks"]} == {"disk.size", "disk.free", "disk.writable"}
    # The role's checks went through the collection's action plugin.
    checks: dict[str, Any] = {}
    for result in results:
        for item in result.get("results", [result]):
            if isinstance(item, dict) and "nodeprep_check" in item:
                checks[item["nodeprep_check"]["check"]] = item["nodeprep_check"]
    assert checks["disk.writable"]["status"] == "pass", checks
    # The preflight role recorded its marker on the node.
    marker = json.loads((container.root / "etc/nodeprep/roles/preflight.json").read_text())
    assert marker["role"] == "preflight", marker


def test_ansible_doc_prints_every_modules_documentation(installed: tuple[Path, Path]) -> None:
    _, collections = installed
    names = [f"{FQCN}.{name}" for name in MODULES]
    run = subprocess.run(
        [str(BIN / "ansible-doc"), "--json", *names],
        capture_output=True, text=True, timeout=300, check=False, env=_env(collections),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "WARNING" not in run.stderr, run.stderr
    docs = json.loads(run.stdout)
    assert sorted(docs) == names
    for name, doc in docs.items():
        assert doc["doc"]["short_description"], name
        assert doc["doc"].get("options") is not None, name
        assert FQCN in doc["examples"], name
        assert doc["return"], name
