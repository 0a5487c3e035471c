"""``nodeprep provision``: apply the hardening roles to every node of an inventory."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from nodeprep import paths, rollout, runner, wheel
from nodeprep.cli.errors import BadInput
from nodeprep.cli.options import (
    ask_passwords,
    connection_options,
    fast_option,
    load_inventory,
    merge_extra_vars,
    refuse_fast_without_mitogen,
    run_options,
    split_csv,
    user_ansible_config,
)
from nodeprep.cli.progress import ProgressView, print_recap, summary, write_json
from nodeprep.inventory import Inventory


@click.command()
@click.argument("inventory", type=click.Path(path_type=Path))
@run_options
@click.option("--check", is_flag=True, help="Ansible check mode: report, change nothing.")
@click.option("--diff", is_flag=True, help="Show the changes to files and settings.")
@click.option("--list-hosts", is_flag=True, help="List the hosts that would be provisioned.")
@click.option(
    "--rolling/--no-rolling",
    default=True,
    show_default=True,
    help="Roll the disruptive roles (bonding, volume growth) out in batches, canary first.",
)
@click.option("--canary", metavar="HOST", help="The node that goes first, alone.")
@click.option(
    "--batches",
    metavar="LIST",
    default="1,10%,100%",
    show_default=True,
    help="Batch sizes of the rolling roles: node counts or percentages; the last repeats.",
)
@fast_option
@connection_options
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
    rolling: bool,
    canary: str | None,
    batches: str,
    fast: bool,
    connection: runner.Connection,
) -> None:
    """Apply the hardening roles to every node of INVENTORY.

    Safe roles run on every node at once; the disruptive ones (bonding, volume growth)
    roll out in batches, the canary first, each batch verified before the next, and a
    failure stops the rollout: the summary names the batch and the untouched nodes.

    Exit codes: 0 all good, 1 a task failed on some host, 2 bad input
    (nothing was run), 3 some host was unreachable.

    \b
    Examples:
      nodeprep provision inventory.ini
      nodeprep provision inventory.ini --tags preflight --check
      nodeprep provision inventory.ini -l gpu01 -e preflight_min_free_gb=50 --json out.json
      nodeprep provision inventory.ini --canary gpu07 --batches 1,25%,100%
      nodeprep provision inventory.ini -u ubuntu --private-key ~/.ssh/fleet.pem -b

    Ansible settings come from nodeprep's ansible.cfg with the user's own (ANSIBLE_CONFIG,
    ./ansible.cfg, ~/.ansible.cfg or /etc/ansible/ansible.cfg, as Ansible finds it) over it.
    """
    try:
        serial: list[int | str] = rollout.parse_serial(batches) if rolling else ["100%"]
    except rollout.RolloutInputError as exc:
        raise BadInput(str(exc)) from exc
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
        fast=fast,
        connection=connection,
        user_config=user_ansible_config(),
    )
    refuse_fast_without_mitogen(fast)
    rolling_plan = RollingPlan(serial, canary)
    raise SystemExit(run_playbook(request, json_path, list_hosts, rolling_plan))


@dataclasses.dataclass(frozen=True)
class RollingPlan:
    """How the rolling play of provision.yml should batch the selected hosts."""

    serial: list[int | str]
    canary: str | None


def run_playbook(
    request: runner.RunRequest,
    json_path: Path | None,
    list_hosts: bool = False,
    rolling_plan: RollingPlan | None = None,
) -> int:
    """Validate, run with live progress, print the recap; returns the exit code."""
    loaded = load_inventory(request)
    hosts = loaded.selected
    console = Console(highlight=False)
    if list_hosts:
        for host in hosts:
            click.echo(host)
        return 0
    planned: list[list[str]] = []
    if rolling_plan is not None:
        try:
            ordered = rollout.order_hosts(hosts, rolling_plan.canary)
        except rollout.RolloutInputError as exc:
            raise BadInput(str(exc)) from exc
        planned = rollout.plan_batches(ordered, rolling_plan.serial)
        request = _with_rollout_vars(request, rolling_plan, loaded)
        request = _with_controller_wheel(request, console)
    mode = " in check mode" if request.check else ""
    console.print(
        f"nodeprep: running {request.playbook.name} on {len(hosts)} "
        f"host(s){mode}: {', '.join(hosts)}",
        markup=False,
        soft_wrap=True,
    )
    request = ask_passwords(request)
    started = time.monotonic()
    with ProgressView(console, hosts) as view:
        result = runner.run(request, on_progress=view)
    seconds = time.monotonic() - started
    print_recap(console, result)
    ran = rollout.read_rollout(result, planned) if rolling_plan is not None else None
    for line in rollout.describe(ran) if ran else []:
        console.print(f"nodeprep: {line}", markup=False, soft_wrap=True)
    console.print(
        f"nodeprep: {_verdict(result)} after {seconds:.1f} s (exit {result.exit_code})",
        markup=False,
        soft_wrap=True,
    )
    if json_path is not None:
        data = summary(request, result, seconds)
        if ran is not None:
            data["rollout"] = {
                "planned": ran.planned,
                "batches": ran.batches,
                "stopped": ran.stopped,
                "untouched": ran.untouched,
            }
        write_json(json_path, data)
    return result.exit_code


def _with_rollout_vars(
    request: runner.RunRequest, plan: RollingPlan, loaded: Inventory
) -> runner.RunRequest:
    """Batching as variables of provision.yml's rolling play (-e still wins), and whether any
    selected host has a bond to converge (the play then runs under the linear strategy,
    --fast or not; without this variable it assumes one has)."""
    if "nic_bond_members" in request.extra_vars:
        bonds = bool(request.extra_vars["nic_bond_members"])
    else:
        bonds = bool(loaded.bonded)
    extra: dict[str, Any] = {
        "nodeprep_rollout_serial": plan.serial,
        "nodeprep_rollout_canary": plan.canary or "",
        "nodeprep_rollout_bonds": bonds,
    }
    return dataclasses.replace(request, extra_vars={**extra, **request.extra_vars})


def _with_controller_wheel(request: runner.RunRequest, console: Console) -> runner.RunRequest:
    """Build (once per content) the wheel of this checkout that the nodes install nodeprep from,
    and fetch (once) the wheel of prometheus-client, the heartbeat's metrics writer, which the
    nodes' --no-deps install of nodeprep leaves out.

    A step of its own: it runs before any node is touched and can take seconds the first
    time, so it says what it built; -e nodeprep_controller_wheel=... (or
    nodeprep_prometheus_wheel=...) still wins.
    """
    wheels = Path.home() / ".cache" / "nodeprep" / "wheels"
    try:
        built = wheel.controller_wheel(wheels)
        if built is None:
            return request
        metrics = request.extra_vars.get("nodeprep_prometheus_wheel") or wheel.dependency_wheel(
            "prometheus-client", wheels / "deps", "nodeprep_prometheus_wheel"
        )
    except wheel.WheelError as exc:
        raise BadInput(str(exc)) from exc
    console.print(f"nodeprep: nodes get nodeprep from {built}", markup=False, soft_wrap=True)
    extra = {"nodeprep_controller_wheel": str(built), "nodeprep_prometheus_wheel": str(metrics)}
    return dataclasses.replace(request, extra_vars={**extra, **request.extra_vars})


def _verdict(result: runner.RunResult) -> str:
    if result.unreachable_hosts:
        return f"unreachable: {', '.join(result.unreachable_hosts)}"
    if result.exit_code:
        failed = sorted({f.host for f in result.failures}) or ["(see above)"]
        return f"failed on {', '.join(failed)}"
    return "all hosts ok"
