"""Where nodeprep's Ansible content lives, in a checkout and in an installed wheel.

A wheel carries playbooks/, roles/, containers/ and ansible.cfg under
``nodeprep/_data``; an editable install (a checkout) uses them from the
repository root. Everything that needs those files asks this module.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


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
