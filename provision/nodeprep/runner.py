"""The ansible-runner boundary: the only module that imports ansible_runner.

It turns a :class:`RunRequest` into runner keyword arguments (plain code that
tests can check), streams the runner's events to a progress callback as
:class:`Progress` items, and maps the outcome to a typed :class:`RunResult`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeprep import ansible_config, paths

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_UNREACHABLE = 0, 1, 3

# Under a run's private directory: the collections path that holds nodeprep.hardening.
COLLECTIONS_SUBDIR = "collections"

# Runner event name -> outcome shown to the user.
_OUTCOMES = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


@dataclass(frozen=True)
class Connection:
    """How to reach and become root on the nodes, named as ansible-playbook names the options.

    ``passwords`` maps the prompt ansible-playbook prints (a regex, as ansible-runner takes
    it) to the answer; the CLI asks the user for them, so they never reach a command line,
    a file or a log.
    """

    user: str | None = None
    private_key: Path | None = None
    become: bool = False
    ask_become_pass: bool = False
    vault_password_file: Path | None = None
    ask_vault_pass: bool = False
    passwords: Mapping[str, str] = field(default_factory=dict, repr=False)

    def cmdline(self) -> list[str]:
        args = ["--user", self.user] if self.user else []
        args += ["--private-key", str(self.private_key.resolve())] if self.private_key else []
        args += ["--become"] if self.become else []
        args += ["--ask-become-pass"] if self.ask_become_pass else []
        if self.vault_password_file:
            args += ["--vault-password-file", str(self.vault_password_file.resolve())]
        args += ["--ask-vault-pass"] if self.ask_vault_pass else []
        return args


BECOME_PROMPT = r"^BECOME password.*:\s*?$"
VAULT_PROMPT = r"^Vault password.*:\s*?$"


@dataclass(frozen=True)
class RunRequest:
    """One playbook run, as the CLI asked for it."""

    playbook: Path
    inventory: Path
    limit: str | None = None
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    check: bool = False
    diff: bool = False
    forks: int | None = None
    extra_vars: Mapping[str, Any] = field(default_factory=dict)
    verbosity: int = 0
    fast: bool = False  # the mitogen strategy: one Python per node instead of one per task
    connection: Connection = field(default_factory=Connection)
    # The user's own Ansible config (as Ansible would find it), laid over the project's.
    user_config: Path | None = None


class FastModeUnavailable(RuntimeError):
    """--fast was asked for but the mitogen package is not installed."""


def mitogen_env() -> dict[str, str]:
    """Environment that selects mitogen's linear strategy for ansible-playbook."""
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or spec.origin is None:
        raise FastModeUnavailable(
            "--fast needs the mitogen package, which is not installed; install it with "
            "pip install 'nodeprep[mitogen]' or run without --fast."
        )
    plugins = Path(spec.origin).parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear"}


@dataclass(frozen=True)
class Progress:
    """One step of a run: a task starting (host is None) or a task's outcome on a host."""

    task: str
    role: str
    host: str | None = None
    outcome: str | None = None  # ok | changed | failed | unreachable | skipped
    message: str = ""
    checks: tuple[dict[str, Any], ...] = ()  # nodeprep_check results this outcome carried


@dataclass
class HostRecap:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class TaskFailure:
    host: str
    task: str
    role: str
    message: str
    unreachable: bool = False
    refused: bool = False  # a module refused before changing anything (nodeprep_refused)


@dataclass(frozen=True)
class TaskChange:
    """A task that changed a host: the recap names them, so a second run's changes can be found."""

    host: str
    task: str
    role: str


@dataclass
class PlayBatch:
    """One start of a play: with `serial`, each batch of hosts starts the play again."""

    name: str
    hosts: list[str] = field(default_factory=list)


@dataclass
class RunResult:
    status: str
    rc: int
    recap: dict[str, HostRecap]
    failures: list[TaskFailure]
    results: list[dict[str, Any]] = field(default_factory=list)
    plays: list[PlayBatch] = field(default_factory=list)
    changes: list[TaskChange] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)  # nodeprep_job payloads

    @property
    def unreachable_hosts(self) -> list[str]:
        return sorted(h for h, r in self.recap.items() if r.unreachable)

    @property
    def exit_code(self) -> int:
        if self.unreachable_hosts:
            return EXIT_UNREACHABLE
        if self.failures or self.rc != 0 or self.status != "successful":
            return EXIT_FAILED
        return EXIT_OK


def build_runner_kwargs(
    request: RunRequest, private_data_dir: Path, config: Path | None = None
) -> dict[str, Any]:
    """Keyword arguments for ``ansible_runner.run``; no side effects. CONFIG: the run's
    Ansible config (the project's, with the user's over it), else the project's own."""
    cmdline = [flag for flag, on in (("--check", request.check), ("--diff", request.diff)) if on]
    cmdline += request.connection.cmdline()
    kwargs: dict[str, Any] = {
        "private_data_dir": str(private_data_dir),
        "project_dir": str(request.playbook.parent),
        "playbook": str(request.playbook),
        # ansible-runner changes directory to the project: relative paths would break.
        "inventory": str(request.inventory.resolve()),
        "envvars": {
            # The ansible-playbook installed beside nodeprep, also when its venv is not active.
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            "ANSIBLE_CONFIG": str(config or paths.ansible_cfg()),
            "ANSIBLE_ROLES_PATH": str(paths.roles_dir()),
            # This copy of nodeprep.hardening first; the `ansible` package's collections
            # (community.general, amazon.aws) are still found on Python's path.
            "ANSIBLE_COLLECTIONS_PATH": str(private_data_dir / COLLECTIONS_SUBDIR),
            "ANSIBLE_NOCOLOR": "1",
            **(mitogen_env() if request.fast else {}),
        },
        "extravars": dict(request.extra_vars),
        "verbosity": request.verbosity,
        "quiet": True,
        "suppress_env_files": True,
    }
    optional = {
        "limit": request.limit,
        "tags": ",".join(request.tags),
        "skip_tags": ",".join(request.skip_tags),
        "forks": request.forks,
        "cmdline": shlex.join(cmdline),
        "passwords": dict(request.connection.passwords),
    }
    kwargs.update({key: value for key, value in optional.items() if value})
    return kwargs


class _EventCollector:
    """Turns raw runner events into progress callbacks, a recap and failures."""

    def __init__(self, on_progress: Callable[[Progress], None] | None) -> None:
        self.on_progress = on_progress
        self.recap: dict[str, HostRecap] = {}
        self.failures: list[TaskFailure] = []
        self.results: list[dict[str, Any]] = []
        self.plays: list[PlayBatch] = []
        self.changes: list[TaskChange] = []
        self.jobs: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> bool:
        data = event.get("event_data") or {}
        name = event.get("event", "")
        task, role = str(data.get("task", "")), str(data.get("role", ""))
        if name == "playbook_on_play_start":
            self.plays.append(PlayBatch(str(data.get("name") or data.get("play") or "")))
        elif name == "playbook_on_task_start":
            self._emit(Progress(task=task, role=role))
        elif name in _OUTCOMES:
            self._host_event(name, data, task, role)
        elif name == "playbook_on_stats":
            self._stats(data)
        return True

    def _host_event(self, name: str, data: dict[str, Any], task: str, role: str) -> None:
        host = str(data.get("host", ""))
        res = data.get("res") or {}
        outcome = _OUTCOMES[name]
        if self.plays and host not in self.plays[-1].hosts:
            self.plays[-1].hosts.append(host)
        if outcome == "ok" and res.get("changed"):
            outcome = "changed"
            self.changes.append(TaskChange(host, task, role))
        if outcome == "failed" and data.get("ignore_errors"):
            outcome = "ok"
        message = _message(res) if outcome in ("failed", "unreachable") else ""
        if outcome in ("failed", "unreachable"):
            refused = isinstance(res, dict) and bool(res.get("nodeprep_refused"))
            self.failures.append(
                TaskFailure(host, task, role, message, outcome == "unreachable", refused)
            )
        if isinstance(res, dict) and isinstance(res.get("nodeprep_job"), dict):
            self.jobs.append({**res["nodeprep_job"], "host": host})
        checks = tuple({"host": host, **found} for found in _checks(res))
        self.results.extend(checks)
        self._emit(Progress(task, role, host=host, outcome=outcome, message=message, checks=checks))

    def _stats(self, data: dict[str, Any]) -> None:
        fields = {
            "ok": "ok",
            "changed": "changed",
            "failures": "failed",
            "dark": "unreachable",
            "skipped": "skipped",
        }
        for stat, attr in fields.items():
            for host, count in (data.get(stat) or {}).items():
                setattr(self.recap.setdefault(host, HostRecap()), attr, int(count))

    def _emit(self, item: Progress) -> None:
        if self.on_progress is not None:
            self.on_progress(item)


def _checks(res: Any) -> list[dict[str, Any]]:
    """nodeprep_check results of a task, or of each item of a looped task."""
    if not isinstance(res, dict):
        return []
    if isinstance(res.get("nodeprep_check"), dict):
        return [res["nodeprep_check"]]
    items = res.get("results") or []
    return [i["nodeprep_check"] for i in items if isinstance(i, dict) and "nodeprep_check" in i]


def _message(res: Any) -> str:
    if not isinstance(res, dict):
        return str(res)
    items = [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    if items:
        # A loop's summary says only "One or more items failed": show each item's reason.
        return " ".join(_message(item) for item in items)
    for key in ("msg", "stderr", "stdout", "module_stderr", "reason"):
        value = res.get(key)
        if value:
            return str(value).strip()
    return "the task failed without a message"


def run(request: RunRequest, on_progress: Callable[[Progress], None] | None = None) -> RunResult:
    """Run one playbook through ansible-runner in a private, temporary data directory."""
    import ansible_runner

    collector = _EventCollector(on_progress)
    private_dir = Path(tempfile.mkdtemp(prefix="nodeprep-run-"))
    try:
        paths.link_collection(private_dir / COLLECTIONS_SUBDIR)
        config = ansible_config.layered(request.user_config, private_dir / "ansible.cfg")
        kwargs = build_runner_kwargs(request, private_dir, config)
        shown = {**kwargs, "passwords": dict.fromkeys(kwargs.get("passwords", {}), "********")}
        log.debug("ansible-runner kwargs: %s", shown)
        outcome = ansible_runner.run(event_handler=collector, **kwargs)
        return RunResult(
            status=str(outcome.status),
            rc=int(outcome.rc if outcome.rc is not None else 1),
            recap=collector.recap,
            failures=collector.failures,
            results=collector.results,
            plays=collector.plays,
            changes=collector.changes,
            jobs=collector.jobs,
        )
    finally:
        shutil.rmtree(private_dir, ignore_errors=True)
