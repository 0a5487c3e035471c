"""Connection values of the selected hosts, judged before ssh ever sees them.

Left to Ansible, ``ansible_port=99999`` or a host named ``node:notaport`` reach
ssh (and come back as "unreachable"), ``ansible_port=abc`` ends in a conversion
error mid-run, and an ``ansible_host`` starting with ``-`` would be read by ssh as
an option. Each is refused here with the host, the variable and the value.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

MAX_NAME_CHARS = 253
# Connections that dial an address; local, chroot and container connections do not.
_NETWORK_CONNECTIONS = {"ssh", "smart", "paramiko", "paramiko_ssh", "winrm", "psrp"}
_LABEL_RE = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")
_NAME_RE = re.compile(r"^[^\s\x00-\x1f\x7f]+$")


class HostValueError(ValueError):
    """One host's connection value is unusable; the message names host, variable and value."""


def check_name(name: str) -> None:
    """Inventory names become file names, log fields and (without ansible_host) addresses."""
    if len(name) > MAX_NAME_CHARS or not _NAME_RE.match(name):
        shown = name[:40] + ("..." if len(name) > 40 else "")
        raise HostValueError(
            f"host name {shown!r} is not usable (at most {MAX_NAME_CHARS} printable "
            "characters, no spaces); rename it and put the address in ansible_host."
        )


def check_connection_values(name: str, variables: Mapping[str, Any]) -> None:
    """Port and address of a host that is reached over the network; templates are left alone."""
    connection = str(variables.get("ansible_connection") or "ssh").rsplit(".", 1)[-1]
    if connection not in _NETWORK_CONNECTIONS:
        return
    for key in ("ansible_port", "ansible_ssh_port"):
        if key in variables:
            _check_port(name, key, variables[key])
    for key in ("ansible_host", "ansible_ssh_host"):
        if key in variables:
            _check_address(name, key, variables[key])
            return
    _check_address(name, "the host name (no ansible_host is set)", name)


def _check_port(name: str, key: str, value: Any) -> None:
    if _templated(value):
        return
    port: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        port = value
    elif isinstance(value, str) and value.strip().isdigit():
        port = int(value.strip())
    if port is None or not 1 <= port <= 65535:
        raise HostValueError(
            f"host {name}: {key}={value!r} is not a TCP port; use a number from 1 to 65535."
        )


def _check_address(name: str, key: str, value: Any) -> None:
    if _templated(value):
        return
    text = str(value) if isinstance(value, str | int) and not isinstance(value, bool) else ""
    if not _is_address(text):
        where = key if key.startswith("the ") else f"{key}={value!r}"
        raise HostValueError(
            f"host {name}: {where} is not a host name or IP address; set ansible_host to the "
            "node's DNS name or address (a port goes in ansible_port)."
        )


def _is_address(text: str) -> bool:
    if not text or len(text) > MAX_NAME_CHARS:
        return False
    try:
        ipaddress.ip_address(text.removeprefix("[").removesuffix("]"))
    except ValueError:
        return all(_LABEL_RE.match(label) for label in text.removesuffix(".").split("."))
    return True


def _templated(value: Any) -> bool:
    """A Jinja expression is resolved by Ansible at run time; nodeprep cannot judge it here."""
    return isinstance(value, str) and "{{" in value
