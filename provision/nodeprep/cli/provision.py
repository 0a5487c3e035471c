"""``nodeprep provision``: apply the hardening roles to every node of an inventory."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from nodeprep import inventory as inventory_mod
from nodeprep import paths, runner
from nodeprep.cli.errors import BadInput
from nodeprep.cli.options import merge_extra_vars, run_options, split_csv
from nodeprep.cli.progress import ProgressView, print_recap, summary, write_json


@click.command()
@click.argument("inventory", type=click.Path(path_type=Path))
@run_options
@click.option("--check", is_flag=True, help="Ansible check mode: report, change nothing.")
@click.option("--diff", is_flag=True, help="Show the changes to files and settings.")
@click.option("--list-hosts", is_flag=True, help="List the hosts that would be provisioned.")
def provision(
    inventory: Path,
    limit: str | None,
    tags: tuple[str, ...],
    skip_tags: tuple[str, ...],
    forks: int | None,
    extra_vars: tuple[dict[str, Any], ...],
    json_path: Path | None,
    verbosity: int,
    check: bool,
    diff: bool,
    list_hosts: bool,
) -> None:
    """Apply the hardening roles to every node of INVENTORY.

    Exit codes: 0 all good, 1 a task failed on some host, 2 bad input
    (nothing was run), 3 some host was unreachable.

    \b
    Examples:
      nodeprep provision inventory.ini
      nodeprep provision inventory.ini --tags preflight --check
      nodeprep provision inventory.ini -l gpu01 -e preflight_min_free_gb=50 --json out.json
    """
    request = runner.RunRequest(
        playbook=paths.playbook("provision.yml"),
        inventory=inventory,
        limit=limit,
        tags=split_csv(tags),
        skip_tags=split_csv(skip_tags),
        check=check,
        diff=diff,
        forks=forks,
        extra_vars=merge_extra_vars(extra_vars),
        verbosity=verbosity,
    )
    raise SystemExit(run_playbook(request, json_path, list_hosts))


def run_playbook(
    request: runner.RunRequest, json_path: Path | None, list_hosts: bool = False
) -> int:
    """Validate, run with live progress, print the recap; returns the exit code."""
    try:
        loaded = inventory_mod.load(request.inventory, request.limit)
    except inventory_mod.InventoryError as exc:
        raise BadInput(str(exc)) from exc
    hosts = loaded.select(request.limit)
    console = Console(highlight=False)
    if list_hosts:
        for host in hosts:
            click.echo(host)
        return 0
    mode = " in check mode" if request.check else ""
    console.print(
        f"nodeprep: running {request.playbook.name} on {len(hosts)} "
        f"host(s){mode}: {', '.join(hosts)}",
        markup=False,
        soft_wrap=True,
    )
    started = time.monotonic()
    with ProgressView(console, hosts) as view:
        result = runner.run(request, on_progress=view)
    seconds = time.monotonic() - started
    print_recap(console, result)
    console.print(
        f"nodeprep: {_verdict(result)} after {seconds:.1f} s (exit {result.exit_code})",
        markup=False,
        soft_wrap=True,
    )
    if json_path is not None:
        write_json(json_path, summary(request, result, seconds))
    return result.exit_code


def _verdict(result: runner.RunResult) -> str:
    if result.unreachable_hosts:
        return f"unreachable: {', '.join(result.unreachable_hosts)}"
    if result.exit_code:
        failed = sorted({f.host for f in result.failures}) or ["(see above)"]
        return f"failed on {', '.join(failed)}"
    return "all hosts ok"
