"""``nodeprep run``, ``status`` and ``stop``: the training job on every selected node.

One playbook (playbooks/job.yml) runs one action of the ``job`` role; everything a user
can get wrong here is refused before it runs (exit 2), and what only a node can judge (a
job of that name still running, the image, free space) is refused there before anything
starts on any node (exit 2 as well).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table

from nodeprep import job, paths, runner
from nodeprep.cli.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, BadInput
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
    user_ansible_config,
    verbose_option,
)
from nodeprep.cli.progress import write_json

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
GOOD_STATES = (job.RUNNING, job.FINISHED)


def _name_option(required: bool) -> Callable[[Any], Any]:
    return click.option(
        "--name", required=required, metavar="NAME", help="The job's name (its tmux session)."
    )


def _common(func: Callable[..., Any]) -> Callable[..., Any]:
    for decorator in reversed(
        [limit_option, forks_option, extra_vars_option, verbose_option, fast_option]
    ):
        func = decorator(func)
    return connection_options(func)


def check_job_name(name: str) -> None:
    try:
        job.check_name(name)
    except job.JobError as exc:
        raise BadInput(str(exc)) from exc


def job_request(
    inventory: Path, limit: str | None, forks: int | None, variables: dict[str, Any],
    verbosity: int, fast: bool, connection: runner.Connection,
) -> runner.RunRequest:  # fmt: skip
    refuse_fast_without_mitogen(fast)
    return runner.RunRequest(
        playbook=paths.playbook("job.yml"),
        inventory=inventory,
        limit=limit,
        forks=forks,
        extra_vars=variables,
        verbosity=verbosity,
        fast=fast,
        connection=connection,
        user_config=user_ansible_config(),
    )


def _run(
    request: runner.RunRequest, console: Console, what: str
) -> tuple[runner.RunResult, list[str]]:
    hosts = load_inventory(request).selected
    request = ask_passwords(request)
    console.print(f"nodeprep {what}: {len(hosts)} host(s): {', '.join(hosts)}", markup=False)
    return runner.run(request), list(hosts)


def _refusals(result: runner.RunResult) -> list[runner.TaskFailure]:
    return [f for f in result.failures if f.refused]


def _report_failures(console: Console, result: runner.RunResult) -> int:
    """Print failures; exit 2 when a node refused (nothing started), else the run's code."""
    for failure in result.failures:
        kind = "unreachable" if failure.unreachable else "refused" if failure.refused else "failed"
        console.print(f"  {failure.host}: {kind}: {failure.message}", markup=False)
    if result.unreachable_hosts:
        return result.exit_code
    return EXIT_BAD_INPUT if _refusals(result) else result.exit_code


@click.command("run", context_settings={"allow_interspersed_args": True})
@click.argument("inventory", type=click.Path(path_type=Path))
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@_name_option(True)
@click.option(
    "--image", metavar="SIF", help="The image on the nodes (default: the provisioned one)."
)
@click.option("--image-sha256", metavar="HASH", help="The image's expected sha256.")
@click.option("--nproc-per-node", type=click.IntRange(1, 1024), default=1, show_default=True)
@click.option("--nnodes", metavar="MIN:MAX", help="torchrun's --nnodes (default: the node count).")
@click.option("--max-restarts", type=click.IntRange(0, 10000), default=3, show_default=True)
@click.option("--run-dir", metavar="DIR", help="The job's directory on each node.")
@_common
def run(
    inventory: Path, command: tuple[str, ...], name: str, image: str | None,
    image_sha256: str | None, nproc_per_node: int, nnodes: str | None, max_restarts: int,
    run_dir: str | None, limit: str | None, forks: int | None,
    extra_vars: tuple[dict[str, Any], ...], verbosity: int, fast: bool,
    connection: runner.Connection,
) -> None:  # fmt: skip
    """Start job NAME on every node of INVENTORY: a tmux session, inside the image, torchrun.

    Without `-- COMMAND ARGS...` the job is the reference trainer, its checkpoints in the
    run directory. The session comes back after a reboot (a systemd unit, until `nodeprep
    stop`); the output is also in RUN_DIR/train.log. Exit codes: 0 started on every node,
    1 a task failed, 2 bad input or a node refused (nothing was started), 3 unreachable.

    \b
    Examples:
      nodeprep run inventory.ini --name pretrain
      nodeprep run inventory.ini --name pretrain --nproc-per-node 8 --nnodes 2:4
      nodeprep run inventory.ini --name ft -- train.py --lr 3e-4
    """
    check_job_name(name)
    if image is not None and not image.startswith("/"):
        raise BadInput(
            f"--image {image!r} is not an absolute path; give the image's path on the nodes."
        )
    if image_sha256 is not None and not _SHA256.match(image_sha256):
        raise BadInput(f"--image-sha256 {image_sha256!r} is not 64 lowercase hex digits; give "
                       "the sha256 `nodeprep build-image` printed.")  # fmt: skip
    if run_dir is not None and not run_dir.startswith("/"):
        raise BadInput(f"--run-dir {run_dir!r} is not an absolute path; give one like "
                       "/data/jobs/NAME.")  # fmt: skip
    variables: dict[str, Any] = {**merge_extra_vars(extra_vars)}
    request = job_request(inventory, limit, forks, variables, verbosity, fast, connection)
    hosts = load_inventory(request).selected
    if not hosts:
        raise BadInput("the inventory selects no host; check INVENTORY and --limit.")
    low, high = (len(hosts), len(hosts))
    if nnodes is not None:
        try:
            low, high = job.parse_nnodes(nnodes)
        except job.JobError as exc:
            raise BadInput(str(exc)) from exc
        if not low <= len(hosts) <= high:
            raise BadInput(
                f"--nnodes {nnodes} does not match the {len(hosts)} selected node(s) "
                f"({', '.join(hosts)}); select that many nodes with --limit or change --nnodes."
            )
    given = {
        "job_name": name,
        "nodeprep_job_action": "run",
        "job_nnodes": f"{low}:{high}" if low != high else str(low),
        "job_nproc_per_node": nproc_per_node,
        "job_max_restarts": max_restarts,
        **({"job_image": image} if image else {}),
        **({"job_image_sha256": image_sha256} if image_sha256 else {}),
        **({"job_run_dir": run_dir} if run_dir else {}),
        **({"job_command": list(command)} if command else {}),
    }
    request = job_request(
        inventory, limit, forks, {**variables, **given}, verbosity, fast, connection
    )
    console = Console(highlight=False)
    started = time.monotonic()
    result, _ = _run(request, console, f"run {name}")
    code = _report_failures(console, result)
    started_on = [found for found in result.jobs if found.get("command")]
    for found in started_on:
        boot = f", started again at boot by {found['unit']}" if found.get("unit") else ""
        console.print(
            f"  {found['host']}: job {name} {found.get('state')} in tmux session {name} "
            f"(log {found.get('run_dir')}/train.log{boot})",
            markup=False,
        )
    if code == EXIT_OK:
        console.print(f"nodeprep run: job {name} started on {len(started_on)} node(s) in "
                      f"{time.monotonic() - started:.1f} s; watch it with `nodeprep status "
                      f"{inventory} --name {name}`, or on a node with `tmux attach -t {name}` "
                      "as the job's user", markup=False)  # fmt: skip
    raise SystemExit(code)


def _checkpoint(found: dict[str, Any]) -> str:
    ckpt = found.get("checkpoint")
    if not ckpt:
        return "-"
    verdict = "verified" if ckpt.get("verified") else f"FAILS: {ckpt.get('problem')}"
    return f"{ckpt['step']} {ckpt['layer']} {ckpt.get('age_s')}s ago {verdict}"


def _emergency(found: dict[str, Any]) -> str:
    record = found.get("emergency")
    if not record:
        return "-"
    latency = float(record.get("committed_time", 0)) - float(record.get("signal_time", 0))
    return f"{record.get('step')} on {record.get('signal')} in {latency:.2f}s"


COLUMNS = ("host", "state", "tmux", "step", "log", "checkpoint", "emergency save", "heartbeat")


def _rows(jobs: list[dict[str, Any]], hosts: list[str]) -> list[tuple[str, ...]]:
    by_host = {found["host"]: found for found in jobs}
    rows = []
    for host in hosts:
        found = by_host.get(host)
        if found is None:
            rows.append((host, "unknown", *["-"] * 6))
            continue
        age, step = found.get("log_age_s"), found.get("step")
        rows.append((
            host, str(found.get("state")), "yes" if found.get("session") else "no",
            str(step if step is not None else "-"), f"{age}s ago" if age is not None else "-",
            _checkpoint(found), _emergency(found), str(found.get("heartbeat", "-")),
        ))  # fmt: skip
    return rows


def _table(jobs: list[dict[str, Any]], hosts: list[str]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in COLUMNS:
        table.add_column(column, no_wrap=True)
    for row in _rows(jobs, hosts):
        table.add_row(*row)
    return table


@click.command("status")
@click.argument("inventory", type=click.Path(path_type=Path))
@_name_option(True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write every node's fields as JSON here.")  # fmt: skip
@_common
def status(
    inventory: Path, name: str, json_path: Path | None, limit: str | None, forks: int | None,
    extra_vars: tuple[dict[str, Any], ...], verbosity: int, fast: bool,
    connection: runner.Connection,
) -> None:  # fmt: skip
    """Show job NAME on every node: state, tmux session, step, log, checkpoint, heartbeat.

    Exit codes: 0 the job runs or finished on every selected node, 1 otherwise (a failed
    job's last log lines are printed), 2 bad input, 3 a node was unreachable.
    """
    check_job_name(name)
    variables = {**merge_extra_vars(extra_vars), "job_name": name, "nodeprep_job_action": "status"}
    request = job_request(inventory, limit, forks, variables, verbosity, fast, connection)
    # A table wider than a pipe's 80 columns is still one line per node.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    result, hosts = _run(request, console, f"status {name}")
    code = _report_failures(console, result)
    console.print(_table(result.jobs, hosts))
    for found in result.jobs:
        if found.get("state") in (job.FAILED, job.RESTARTING) and found.get("tail"):
            console.print(f"{found['host']}: last lines of {found.get('run_dir')}/train.log:",
                          markup=False)  # fmt: skip
            for line in found["tail"]:
                console.print(f"  {line}", markup=False)
    if json_path is not None:
        write_json(json_path, {"name": name, "hosts": {f["host"]: f for f in result.jobs}})
    states = {found["host"]: found.get("state") for found in result.jobs}
    if code == EXIT_OK and any(states.get(host) not in GOOD_STATES for host in hosts):
        code = EXIT_FAILED
    raise SystemExit(code)


@click.command("stop")
@click.argument("inventory", type=click.Path(path_type=Path))
@_name_option(True)
@click.option("--timeout", "timeout_s", type=click.IntRange(1, 86400), default=180,
              show_default=True,
              help="Seconds to wait for every rank to save and exit.")  # fmt: skip
@click.option("--kill", is_flag=True, help="SIGKILL every process of the job (no save).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write every node's outcome as JSON here.")  # fmt: skip
@_common
def stop(
    inventory: Path, name: str, timeout_s: int, kill: bool, json_path: Path | None,
    limit: str | None, forks: int | None, extra_vars: tuple[dict[str, Any], ...],
    verbosity: int, fast: bool, connection: runner.Connection,
) -> None:  # fmt: skip
    """Stop job NAME: SIGTERM to torchrun, which passes it to every rank (each saves an
    emergency checkpoint and exits 143), as a preemption does; the boot unit is removed.

    Nodes where the job still runs after --timeout are named and left running: nothing is
    killed unless --kill asks for it. Exit codes: 0 stopped everywhere, 1 still running
    somewhere, 2 bad input, 3 a node was unreachable.
    """
    check_job_name(name)
    variables = {
        **merge_extra_vars(extra_vars), "job_name": name, "nodeprep_job_action": "stop",
        "job_stop_timeout_s": timeout_s, "job_kill": kill,
    }  # fmt: skip
    request = job_request(inventory, limit, forks, variables, verbosity, fast, connection)
    console = Console(highlight=False)
    result, _hosts = _run(request, console, f"stop {name}")
    code = _report_failures(console, result)
    running = []
    for found in result.jobs:
        host = found["host"]
        if found.get("still_running"):
            running.append(host)
            console.print(f"  {host}: still running after {timeout_s} s; left running "
                          "(nodeprep stop --kill ends it without a save)",
                          markup=False)  # fmt: skip
            continue
        console.print(f"  {host}: {found.get('state')} ({found.get('signal')} after "
                      f"{found.get('stop_seconds')} s); emergency save: {_emergency(found)}; "
                      f"newest checkpoint: {_checkpoint(found)}", markup=False)  # fmt: skip
    if json_path is not None:
        write_json(json_path, {"name": name, "hosts": {f["host"]: f for f in result.jobs}})
    if code == EXIT_OK and running:
        code = EXIT_FAILED
    raise SystemExit(code)
