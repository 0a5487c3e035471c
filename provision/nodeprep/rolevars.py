"""Role variables checked on the controller, before any node is contacted.

Each role declares its variables in ``roles/*/meta/argument_specs.yml``; Ansible checks
them only when the role starts on a host, so a wrong type or value given with ``-e`` or in
the inventory used to fail every host at its first task (exit 1, after connecting). Here the
same declarations go through Ansible's own :class:`ArgumentSpecValidator` first, each value
where the user set it, and the first wrong one is one sentence naming it (exit 2).

Values Ansible would template (``{{ ... }}``) are left to the role, which sees them rendered.
A variable's top-level ``required`` is not checked here: the role's own checks say what is
missing, and a fleet may set it on some hosts only.

Where a spec can say no more than "a list of mappings", the role's own validator judges the
inside too: the heartbeat's probes and actions go through the daemon's config parser (the
one the role's config check and the daemon itself run), without the node's directories.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from nodeprep import paths


class RoleVarError(ValueError):
    """A role variable has a wrong type or value; ``str()`` is one sentence with the fix."""


@functools.cache
def declared() -> dict[str, tuple[str, Path, dict[str, Any]]]:
    """Every role variable of every entry point: name -> (role, spec file, argument spec)."""
    found: dict[str, tuple[str, Path, dict[str, Any]]] = {}
    for spec_file in sorted(paths.roles_dir().glob("*/meta/argument_specs.yml")):
        role = spec_file.parent.parent.name
        entries = (yaml.safe_load(spec_file.read_text()) or {}).get("argument_specs") or {}
        for entry in entries.values():
            for name, given in (entry.get("options") or {}).items():
                spec = {k: copy.deepcopy(v) for k, v in given.items() if k != "required"}
                found.setdefault(name, (role, spec_file, spec))
    return found


def _templated(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(_templated(k) or _templated(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_templated(v) for v in value)
    return False


def problem(name: str, value: Any) -> str | None:
    """Why VALUE is not a valid NAME for its role, or None (also for undeclared names)."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    if name not in declared() or _templated(value):
        return None
    role, spec_file, spec = declared()[name]
    result = ArgumentSpecValidator({name: spec}).validate({name: value})
    messages = [
        f"unsupported key {err}" if type(err).__name__ == "UnsupportedError" else str(err)
        for err in result.errors.errors
    ]
    said = next((m for m in messages if name in m), messages[0]) if messages else None
    if said is None and name in _BOUNDED:  # as the role sees it: "4096,16384" is a list
        said = _bounded(name, result.validated_parameters.get(name, value))
    said = said or _shape(name, value) or _inside(name, value)
    if said is None:
        return None
    return (
        f"{name} = {value!r} is not valid for role {role} ({said}); fix it as {spec_file} describes"
    )


# Numbers a spec's type cannot bound: the least value (and the port's most).
_LEAST = {"interconnect_iters": 1, "interconnect_timeout_s": 1, "interconnect_rdzv_port": 1,
          "interconnect_min_busbw_gbps": 0, "interconnect_max_latency_ms": 0}  # fmt: skip
_BOUNDED = {*_LEAST, "interconnect_sizes"}


def _bounded(name: str, value: Any) -> str | None:
    """What a number's type cannot say: its bounds (None: within them, or not one)."""
    if name in _LEAST:
        number = float(value)
        if number < _LEAST[name] or (name == "interconnect_rdzv_port" and number > 65535):
            most = " and at most 65535" if name == "interconnect_rdzv_port" else ""
            return f"give a number of at least {_LEAST[name]}{most}"
    if name == "interconnect_sizes" and (not value or any(int(size) < 4 for size in value)):
        return "give one or more message sizes in bytes, each at least 4"
    return None


def _shape(name: str, value: Any) -> str | None:
    """What a spec's type cannot say of a path or URL variable (None: fine, or not one)."""
    if name in ("heartbeat_watch_paths", "smoke_data"):
        given = value if isinstance(value, list) else [value] if value else []
        relative = [path for path in given if not str(path).startswith("/")]
        return f"{name} holds {relative[0]!r}; give absolute paths" if relative else None
    if name in ("job_heartbeat_config", "job_heartbeat_metrics_path"):
        one = isinstance(value, str) and value.startswith("/")
        return None if one else "give one absolute path"
    if name == "heartbeat_metadata_url":
        plain = isinstance(value, str) and value.startswith("http://")
        return None if plain else "the metadata service answers plain http://, as http://IP"
    return None


def _inside(name: str, value: Any) -> str | None:
    """The node's own verdict on the data sets, or the daemon's on the heartbeat's probes,
    actions or growable volumes (None: valid, or not one of those). A probe list is judged
    with the role's default actions and vice versa."""
    from nodeprep.data import staging
    from nodeprep.heartbeat import config

    if name in ("datasets", "dataset_allowed_roots"):
        try:
            if name == "datasets":
                staging.parse_datasets(value, allowed_roots=None)
            else:
                staging.check_roots(value)
        except staging.StagingError as err:
            return str(err)
        return None
    if name == "heartbeat_probes":
        document: dict[str, Any] = {"probes": value}
    elif name == "heartbeat_actions":
        document = {"probes": [{"name": "gpu", "type": "gpu"}], "actions": value}
    elif name == "heartbeat_grow_volumes":
        document = {"probes": [{"name": "gpu", "type": "gpu"}], "grow": {"volumes": value}}
    else:
        return None
    try:
        config.parse(document, check_paths=False)
    except config.ConfigError as err:
        return str(err).rstrip(".")
    return None


def check(values: Mapping[str, Any], where: str) -> None:
    """Raise :class:`RoleVarError` for the first wrong role variable among VALUES."""
    for name in sorted(values):
        said = problem(name, values[name])
        if said is not None:
            raise RoleVarError(f"{where}: {said}.")
