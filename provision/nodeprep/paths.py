"""Where nodeprep's Ansible content lives, in a checkout and in an installed wheel.

A wheel carries the collection (galaxy.yml, meta/, plugins/, playbooks/, roles/),
containers/ and ansible.cfg under ``nodeprep/_data``; an editable install (a checkout)
uses them from the repository root, which is the collection root. Everything that needs
those files asks this module.
"""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent

# The collection's name (galaxy.yml); modules are called as nodeprep.hardening.MODULE.
COLLECTION_NAMESPACE = "nodeprep"
COLLECTION_NAME = "hardening"


def data_dir() -> Path:
    """The directory that holds playbooks/, roles/, containers/ and ansible.cfg."""
    bundled = _PACKAGE_DIR / "_data"
    if (bundled / "playbooks").is_dir():
        return bundled
    return _PACKAGE_DIR.parent.parent


def playbook(name: str) -> Path:
    """Absolute path of a bundled playbook, e.g. ``playbook("provision.yml")``."""
    return data_dir() / "playbooks" / name


def checks_file() -> Path:
    """The one declaration of verify's check groups (read by verify.yml and the CLI)."""
    return data_dir() / "playbooks" / "vars" / "checks.yml"


def roles_dir() -> Path:
    return data_dir() / "roles"


def ansible_cfg() -> Path:
    return data_dir() / "ansible.cfg"


def containers_dir() -> Path:
    return data_dir() / "containers"


def link_collection(into: Path) -> Path:
    """Make *into* a collections path that holds this copy of the collection; returns *into*.

    Ansible finds a collection only at ``PATH/ansible_collections/NAMESPACE/NAME``; the data
    directory is the collection root, so a symlink there makes the copy nodeprep carries
    (a checkout or the wheel) the one Ansible loads. *into* is usually a run's private
    directory; where it is shared (the checkout's .ansible/collections), processes may race.
    """
    link = into / "ansible_collections" / COLLECTION_NAMESPACE / COLLECTION_NAME
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        try:
            os.symlink(data_dir(), link, target_is_directory=True)
        except FileExistsError:
            if not link.is_symlink():  # another process's link is as good as ours; else raise
                raise
    return into
