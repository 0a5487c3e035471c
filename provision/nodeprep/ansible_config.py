"""The Ansible config of a run: the project's defaults under the user's own settings.

Ansible reads one config file, the first of $ANSIBLE_CONFIG, ./ansible.cfg, ~/.ansible.cfg
and /etc/ansible/ansible.cfg that exists. A run points ANSIBLE_CONFIG at a file written for
it: the project's ansible.cfg with the user's file (found the way Ansible would find it,
by Ansible's own function) laid over it, key by key. What the user sets (remote_user, a
private key, ssh_args, a vault password file) wins; what they leave out keeps nodeprep's
default. Ansible resolves a relative path in a config file against that file's directory,
so the user's relative paths are made absolute against theirs before the file moves.
"""

from __future__ import annotations

import configparser
import os
from functools import cache
from pathlib import Path

from nodeprep import paths

# Ansible config types whose values are paths; pathspec and pathlist hold several.
_SEPARATORS = {"path": None, "tmppath": None, "tmp": None, "pathspec": os.pathsep, "pathlist": ","}


class ConfigError(ValueError):
    """The user's ansible.cfg cannot be read; the message names the file and the problem."""


def user_config() -> Path | None:
    """The config file Ansible itself would read here, or None (this process's env and cwd)."""
    from ansible.config.manager import find_ini_config_file

    found = find_ini_config_file()
    return Path(found) if found else None


@cache
def _path_options() -> dict[tuple[str, str], str]:
    """(section, key) -> type, for Ansible's own settings whose values are paths."""
    from ansible.config.manager import ConfigManager

    found: dict[tuple[str, str], str] = {}
    for definition in ConfigManager().get_configuration_definitions().values():
        kind = definition.get("type")
        if kind in _SEPARATORS:
            for entry in definition.get("ini") or []:
                found[(str(entry["section"]), str(entry["key"]))] = str(kind)
    return found


def _absolute(value: str, kind: str, base: Path) -> str:
    """VALUE with each relative path in it joined to BASE (~ and $VARS are left to Ansible)."""
    separator = _SEPARATORS[kind]
    parts = value.split(separator) if separator else [value]
    fixed = [p if not p.strip() or p.strip()[0] in "/~$" else str(base / p.strip()) for p in parts]
    return (separator or "").join(fixed)


def _parser() -> configparser.ConfigParser:
    # As Ansible reads it (';' starts an inline comment), but values are passed on as
    # written: Ansible interpolates them itself when it reads the layered file.
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    return parser


def read(user: Path) -> configparser.ConfigParser:
    """The user's config file as Ansible would parse it; ConfigError when it cannot be."""
    theirs = _parser()
    try:
        with user.open(encoding="utf-8") as handle:
            theirs.read_file(handle)
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        reason = str(exc).splitlines()[0]
        raise ConfigError(
            f"Cannot read the Ansible config {user} ({reason}); fix it, or point "
            "ANSIBLE_CONFIG at another file."
        ) from exc
    return theirs


def layered(user: Path | None, dest: Path, project: Path | None = None) -> Path:
    """Write the project's config with USER's settings over it to DEST; returns DEST."""
    base = project or paths.ansible_cfg()
    merged = _parser()
    merged.read(base, encoding="utf-8")
    mine = user is not None and user.resolve() == base.resolve()
    if user is not None and not mine:
        options = _path_options()
        theirs = read(user)
        for section in theirs.sections():
            if not merged.has_section(section):
                merged.add_section(section)
            for key, value in theirs.items(section, raw=True):
                kind = options.get((section, key))
                merged.set(section, key, _absolute(value, kind, user.parent) if kind else value)
    over = f", with {user} over it" if user is not None and not mine else ""
    with dest.open("w", encoding="utf-8") as handle:
        handle.write(f"# Written by nodeprep for one run: {base}{over}.\n")
        merged.write(handle)
    return dest
