"""Options shared by the commands that run playbooks, defined once and stacked."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml

from nodeprep import ansible_config, inventory, rolevars, runner
from nodeprep.cli.errors import BadInput
from nodeprep.inventory import source
from nodeprep.textfile import TextFileError, read_text

F = TypeVar("F", bound=Callable[..., Any])
_VARS_FILE_FIX = "give the path of a UTF-8 YAML or JSON file of variables"


class ExtraVars(click.ParamType[dict[str, Any]]):
    """``-e`` values as Ansible takes them: ``k=v [k2=v2 ...]``, inline JSON/YAML, or ``@file``."""

    name = "extra-vars"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> dict[str, Any]:
        if isinstance(value, dict):
            return value
        text = str(value).strip()
        if text.startswith("@"):
            return self._from_file(Path(text[1:]), param, ctx)
        if text.startswith("{"):
            try:
                loaded = _load_yaml(text)
            except yaml.YAMLError as exc:
                self.fail(
                    f"-e {text!r} is not valid JSON or YAML ({_first_line(exc)}); "
                    "fix the quoting or brackets.",
                    param,
                    ctx,
                )
            return self._mapping(loaded, text, param, ctx)
        return self._pairs(text, param, ctx)

    def _pairs(
        self, text: str, param: click.Parameter | None, ctx: click.Context | None
    ) -> dict[str, Any]:
        """KEY=VALUE words split as ansible-playbook splits them (quotes hold spaces)."""
        from ansible.errors import AnsibleError
        from ansible.parsing.splitter import parse_kv

        try:
            pairs = parse_kv(text, check_raw=False)
        except AnsibleError as exc:
            pairs = {"_raw_params": str(exc)}
        if "_raw_params" in pairs or not all(key.isidentifier() for key in pairs):
            self.fail(
                f"-e {text!r} is not KEY=VALUE, inline JSON/YAML or @FILE; "
                "write it like -e preflight_min_free_gb=20.",
                param,
                ctx,
            )
        return {str(key): value for key, value in pairs.items()}

    def _from_file(
        self, path: Path, param: click.Parameter | None, ctx: click.Context | None
    ) -> dict[str, Any]:
        try:
            text = read_text(path, f"-e @{path}", _VARS_FILE_FIX, source.MAX_BYTES)
        except TextFileError as exc:
            self.fail(str(exc), param, ctx)
        try:
            loaded = _load_yaml(text)
        except yaml.YAMLError as exc:
            self.fail(
                f"-e @{path} is not valid YAML or JSON ({_first_line(exc)}); fix the file.",
                param,
                ctx,
            )
        return self._mapping(loaded, f"@{path}", param, ctx)

    def _mapping(
        self, loaded: Any, origin: str, param: click.Parameter | None, ctx: click.Context | None
    ) -> dict[str, Any]:
        if not isinstance(loaded, dict):
            self.fail(f"-e {origin} must be a mapping of variable names to values.", param, ctx)
        return {str(k): v for k, v in loaded.items()}


def _load_yaml(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        if source.yaml_too_large(text):
            raise yaml.YAMLError(
                f"its aliases expand to more than {source.MAX_YAML_NODES} values"
            ) from None
        return yaml.safe_load(text)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0]


def merge_extra_vars(values: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for value in values:
        merged.update(value)
    return merged


def refuse_fast_without_mitogen(fast: bool) -> None:
    """--fast without the mitogen package is bad input: say how to get it, run nothing."""
    if not fast:
        return
    try:
        runner.mitogen_env()
    except runner.FastModeUnavailable as exc:
        raise BadInput(str(exc)) from exc


def split_csv(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


limit_option = click.option(
    "--limit",
    "-l",
    metavar="PATTERN",
    help="Only hosts matching this Ansible host pattern.",
)
forks_option = click.option(
    "--forks",
    "-f",
    type=click.IntRange(min=1, max=500),
    help="Hosts to work on in parallel.",
)
extra_vars_option = click.option(
    "--extra-vars",
    "-e",
    "extra_vars",
    multiple=True,
    type=ExtraVars(),
    help="Variables: KEY=VALUE, inline JSON/YAML, or @FILE (repeatable).",
)
fast_option = click.option(
    "--fast",
    is_flag=True,
    help="Use the mitogen strategy (pip install 'nodeprep[mitogen]'): far fewer seconds per task.",
)
verbose_option = click.option(
    "-v", "--verbose", "verbosity", count=True, help="More Ansible detail (-v to -vvvv)."
)


def run_options(func: F) -> F:
    """The options every playbook-running command takes."""
    decorators = [
        limit_option,
        click.option(
            "--tags",
            "-t",
            multiple=True,
            metavar="TAGS",
            help="Only tasks with these tags (comma-separated, repeatable).",
        ),
        click.option(
            "--skip-tags",
            multiple=True,
            metavar="TAGS",
            help="Skip tasks with these tags (comma-separated, repeatable).",
        ),
        forks_option,
        extra_vars_option,
        click.option(
            "--json",
            "json_path",
            type=click.Path(dir_okay=False, writable=True, path_type=Path),
            help="Also write a machine-readable summary here.",
        ),
        verbose_option,
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


_KEY_FILE = click.Path(exists=True, dir_okay=False, readable=True, path_type=Path)
_CONNECTION_OPTIONS = [
    click.option("--user", "-u", metavar="USER", help="Connect as this user (remote_user)."),
    click.option("--private-key", type=_KEY_FILE, help="SSH private key file for the connection."),
    click.option("--become", "-b", is_flag=True, help="Run operations with become (sudo)."),
    click.option("--ask-become-pass", "-K", is_flag=True, help="Ask for the become password."),
    click.option("--vault-password-file", type=_KEY_FILE, help="Vault password file."),
    click.option("--ask-vault-pass", "-J", is_flag=True, help="Ask for the vault password."),
]


def connection_options(func: F) -> F:
    """ansible-playbook's connection, become and vault options, passed on as ``connection``."""

    @functools.wraps(func)
    def wrapper(
        *args: Any,
        user: str | None,
        private_key: Path | None,
        become: bool,
        ask_become_pass: bool,
        vault_password_file: Path | None,
        ask_vault_pass: bool,
        **kwargs: Any,
    ) -> Any:
        if user is not None and not user.strip():
            raise BadInput("--user is empty; give the login name to connect as.")
        if vault_password_file and ask_vault_pass:
            raise BadInput("--vault-password-file and --ask-vault-pass exclude each other; "
                           "give one.")  # fmt: skip
        connection = runner.Connection(
            user, private_key, become, ask_become_pass, vault_password_file, ask_vault_pass
        )
        return func(*args, connection=connection, **kwargs)

    for decorator in reversed(_CONNECTION_OPTIONS):
        wrapper = decorator(wrapper)
    return wrapper  # type: ignore[return-value]


def ask_passwords(request: runner.RunRequest) -> runner.RunRequest:
    """REQUEST with the passwords its -K / -J ask for, read from the terminal (not echoed)."""
    connection, answers = request.connection, {}
    if connection.ask_become_pass:
        answers[runner.BECOME_PROMPT] = click.prompt("BECOME password", hide_input=True)
    if connection.ask_vault_pass:
        answers[runner.VAULT_PROMPT] = click.prompt("Vault password", hide_input=True)
    if not answers:
        return request
    asked = dataclasses.replace(connection, passwords=answers)
    return dataclasses.replace(request, connection=asked)


def user_ansible_config() -> Path | None:
    """The user's own Ansible config (where Ansible would look), checked before any run."""
    found = ansible_config.user_config()
    if found is not None:
        try:
            ansible_config.read(found)
        except ansible_config.ConfigError as exc:
            raise BadInput(str(exc)) from exc
    return found


def load_inventory(request: runner.RunRequest) -> inventory.Inventory:
    """The request's inventory, its -e and every selected host's role variables checked.

    A wrong role variable is refused here, naming where it was set, before any connection.
    """
    try:
        rolevars.check(request.extra_vars, "-e")
        return inventory.load(request.inventory, request.limit, frozenset(request.extra_vars))
    except (rolevars.RoleVarError, inventory.InventoryError) as exc:
        raise BadInput(str(exc)) from exc
