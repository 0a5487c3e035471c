"""``nodeprep verify``: run every check on every node and report pass, fail or skip."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.text import Text

from nodeprep import checks as check_groups
from nodeprep import paths, report, runner
from nodeprep.cli.errors import BadInput
from nodeprep.cli.options import (
    ask_passwords,
    connection_options,
    extra_vars_option,
    fast_option,
    forks_option,
    limit_option,
    load_inventory,
    merge_extra_vars,
    refuse_fast_without_mitogen,
    split_csv,
    user_ansible_config,
    verbose_option,
)
from nodeprep.cli.progress import Ticker, write_json


def parse_checks(values: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """(selectors, groups to run) from --checks; unknown names are refused before any run."""
    selectors = split_csv(values)
    known = check_groups.declared().known
    for name in selectors:
        if name.split(".", 1)[0] not in known:
            raise BadInput(
                f"--checks {name!r} names no check group; use one of {', '.join(known)} "
                "or a full check name such as heartbeat.service."
            )
    default = list(check_groups.declared().groups)
    groups = sorted({name.split(".", 1)[0] for name in selectors}) if selectors else default
    return selectors, groups


class _Progress:
    """One line per check result as it arrives (the table comes at the end)."""

    def __init__(self, console: Console, selectors: tuple[str, ...]) -> None:
        self.console, self.selectors = console, selectors
        self.task = "the first task"
        # A check can take minutes (the smoke drill): say what is running meanwhile.
        self.ticker = Ticker(console, lambda: f"running TASK [{self.task}]")

    def __call__(self, item: runner.Progress) -> None:
        if item.host is None:
            self.task = f"{item.role} : {item.task}" if item.role else item.task
            self.ticker.mark(restart=True, printed=False)
        if item.checks:
            self.ticker.mark()
        for found in item.checks:
            if not report.selected(str(found.get("check")), self.selectors):
                continue
            status = str(found.get("status"))
            style = {"pass": "green", "fail": "bold red"}.get(status, "yellow")
            line = Text(f"  {status:<4} ", style=style)
            line.append(f"{found.get('host')} {found.get('check')} ({found.get('seconds')} s)")
            self.console.print(line, soft_wrap=True)
        if item.outcome == "unreachable":
            self.console.print(f"  UNREACHABLE {item.host}: {item.message}", markup=False)


@click.command()
@click.argument("inventory", type=click.Path(path_type=Path))
@limit_option
@click.option(
    "--checks",
    multiple=True,
    metavar="NAMES",
    help="Only these check groups or checks (comma-separated, repeatable).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report as JSON here.",
)
@click.option(
    "--junit",
    "junit_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report as JUnit XML here (for CI systems).",
)
@click.option(
    "--drill",
    is_flag=True,
    help="Also run the disruptive drills (a trainer, a stopped probe target).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.IntRange(1, 86400),
    default=60,
    show_default=True,
    help="Seconds each probe may take before its check fails.",
)
@forks_option
@extra_vars_option
@verbose_option
@fast_option
@connection_options
def verify(
    inventory: Path,
    limit: str | None,
    checks: tuple[str, ...],
    json_path: Path | None,
    junit_path: Path | None,
    drill: bool,
    timeout_s: int,
    forks: int | None,
    extra_vars: tuple[dict[str, Any], ...],
    verbosity: int,
    fast: bool,
    connection: runner.Connection,
) -> None:
    """Check every node of INVENTORY and report each check as pass, fail or skip.

    A skip always says why and never counts as a pass. Exit codes: 0 nothing
    failed, 1 a check failed, 2 bad input (nothing was run), 3 a host was unreachable.

    \b
    Examples:
      nodeprep verify inventory.ini
      nodeprep verify inventory.ini --checks heartbeat,disk --junit verify.xml
      nodeprep verify inventory.ini -l gpu01 --drill --json report.json
      nodeprep verify inventory.ini --fast
    """
    selectors, groups = parse_checks(checks)
    refuse_fast_without_mitogen(fast)
    if drill and not selectors:
        groups.append(check_groups.declared().drill)
    if check_groups.declared().drill in groups and not drill:
        raise BadInput("--checks drill runs disruptive drills; add --drill to allow them.")
    variables = {
        **merge_extra_vars(extra_vars),
        "verify_groups": groups,
        "verify_drill": drill,
        "verify_timeout_s": timeout_s,
    }
    request = runner.RunRequest(
        playbook=paths.playbook("verify.yml"),
        inventory=inventory,
        limit=limit,
        forks=forks,
        extra_vars=variables,
        verbosity=verbosity,
        fast=fast,
        connection=connection,
        user_config=user_ansible_config(),
    )
    raise SystemExit(run_verify(request, selectors, json_path, junit_path))


def run_verify(
    request: runner.RunRequest,
    selectors: tuple[str, ...],
    json_path: Path | None,
    junit_path: Path | None,
) -> int:
    """Run verify.yml, print the report, write JSON/JUnit; returns the exit code."""
    hosts = load_inventory(request).selected
    console = Console(highlight=False)
    request = ask_passwords(request)
    console.print(f"nodeprep verify: {len(hosts)} host(s): {', '.join(hosts)}", markup=False)
    started = time.monotonic()
    progress = _Progress(console, selectors)
    with progress.ticker:
        result = runner.run(request, on_progress=progress)
    built = report.from_run(result, hosts, selectors)
    built.seconds = time.monotonic() - started
    report.render(console, built)
    if json_path is not None:
        write_json(json_path, report.to_json(built))
    if junit_path is not None:
        junit_path.parent.mkdir(parents=True, exist_ok=True)
        junit_path.write_text(report.to_junit(built))
    return built.exit_code
