"""``nodeprep drill``: chaos drills on one node against a running job, and what each cost.

Each fault is one run of the job role's ``drill`` action on the chosen node: the node arms
the fault's undo as a systemd timer, injects the fault, watches the job's log while it
lasts, undoes it and reports the figures (see plugins/module_utils/drill.py). Without
``--name`` the drill starts a paced reference-trainer job on the drilled node first (as
``nodeprep run`` does) and stops it afterwards.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table

from nodeprep import drill, report, runner
from nodeprep.cli.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, BadInput
from nodeprep.cli.job import check_job_name, job_request
from nodeprep.cli.options import (
    ask_passwords,
    connection_options,
    extra_vars_option,
    fast_option,
    forks_option,
    load_inventory,
    merge_extra_vars,
    verbose_option,
)
from nodeprep.cli.progress import write_json

# The job a drill starts itself, on the drilled node only (its log then holds rank 0's
# steps): the reference trainer paced so that it outlives every fault, a checkpoint every
# 10 steps so that a kill costs at most 10, started through its systemd unit (as `nodeprep
# run` does) so that no login session holds it.
OWN_JOB_VARS: dict[str, Any] = {
    "job_trainer_checkpoint_every": 10,
    "job_trainer_extra_args": ["--min-step-s", "0.5"],
}
COLUMNS = ("fault", "node", "result", "detected by", "detect s", "steps lost", "next step s",
           "node as it was")  # fmt: skip


def _why(result: runner.RunResult) -> str:
    return "; ".join(f"{f.host}: {f.message}" for f in result.failures) or "no reason given"


def _code(result: runner.RunResult) -> int:
    if result.unreachable_hosts:
        return EXIT_UNREACHABLE
    if any(f.refused for f in result.failures):
        return EXIT_BAD_INPUT
    return EXIT_FAILED


def _fmt(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _verdict(found: dict[str, Any]) -> str:
    return "skip" if found.get("skipped") else "pass" if found.get("passed") else "fail"


def _row(found: dict[str, Any]) -> tuple[str, ...]:
    limit = found.get("steps_lost_limit")
    lost = found.get("steps_lost")
    return (
        str(found.get("fault")), str(found.get("host")),
        _verdict(found).replace("fail", "FAIL"), _fmt(found.get("detected_by")),
        _fmt(found.get("detect_s")), f"{_fmt(lost)} (limit {limit})",
        _fmt(found.get("next_step_s")), "yes" if found.get("restored") else "NO",
    )  # fmt: skip


def _check(found: dict[str, Any]) -> report.CheckResult:
    detail = str(found.get("detail") or "")
    problems = found.get("problems") or []
    if problems:
        detail = f"{'; '.join(problems)} ({detail})"
    return report.CheckResult(
        str(found.get("host")), f"drill.{found.get('fault')}",
        _verdict(found), detail, float(found.get("seconds") or 0),
    )  # fmt: skip


@click.command("drill")
@click.argument("inventory", type=click.Path(path_type=Path))
@click.option("--name", metavar="NAME", help="The running job to drill (default: start one).")
@click.option("--faults", required=True, metavar="F[,F...]",
              help=f"Faults, in turn: {', '.join(drill.FAULTS)}.")  # fmt: skip
@click.option("-l", "--limit", metavar="HOST",
              help="The node that takes the faults (default: the inventory's first).")  # fmt: skip
@click.option("--duration", "duration_s", type=click.IntRange(1, 3600), default=20,
              show_default=True,
              help="Seconds each link, netem or ssh-drop fault lasts, and a preempt "
              "notice's warning before its SIGTERM.")  # fmt: skip
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the report as JSON here.")  # fmt: skip
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the report as JUnit XML here.")  # fmt: skip
@click.option("--yes", is_flag=True,
              help="Allow faults that can cut a node off (link, blackhole, netem, reboot) "
              "outside the lab.")  # fmt: skip
@forks_option
@extra_vars_option
@verbose_option
@fast_option
@connection_options
def drill_cmd(
    inventory: Path, name: str | None, faults: str, limit: str | None, duration_s: int,
    json_path: Path | None, junit_path: Path | None, yes: bool, forks: int | None,
    extra_vars: tuple[dict[str, Any], ...], verbosity: int, fast: bool,
    connection: runner.Connection,
) -> None:  # fmt: skip
    """Inject faults, one at a time, on one node of INVENTORY against a running job, and
    report what each cost: who detected it and when, steps lost, time to the next step,
    and whether the node is as it was after the fault's undo.

    Every fault's undo is armed on the node before the fault (a systemd timer), so it runs
    even if this command or its connection is lost. Exit codes: 0 every drill met its
    limits, 1 a drill failed them, 2 bad input or a fault that cannot apply on the node
    (named with the reason; nothing changed), 3 a node was unreachable.

    \b
    Examples:
      nodeprep drill inventory.ini --faults kill,netem
      nodeprep drill inventory.ini --name pretrain --faults link -l gpu02 --yes
      nodeprep drill inventory.ini --faults kill --junit drill.xml --json drill.json
      nodeprep drill inventory.ini --name pretrain --faults reboot -l gpu03 --yes

    reboot reboots the node (Ansible's reboot: it waits for a new boot id) and measures how
    the job's boot unit brought the job back; it needs that unit (`nodeprep run` enables it).
    """
    try:
        chosen = drill.parse_faults(faults)
    except drill.DrillError as exc:
        raise BadInput(str(exc)) from exc
    if name is not None:
        check_job_name(name)
    variables = merge_extra_vars(extra_vars)
    whole = load_inventory(
        job_request(inventory, None, forks, variables, verbosity, fast, connection)
    )
    if not whole.hosts:
        raise BadInput(f"inventory {inventory} has no host; a drill needs the job's nodes.")
    target = whole.hosts[0]
    if limit is not None:
        picked = load_inventory(
            job_request(inventory, limit, forks, variables, verbosity, fast, connection)
        ).selected
        if not picked:
            raise BadInput(f"-l {limit!r} matches no host of {inventory}; name the node that "
                           "takes the faults.")  # fmt: skip
        target = picked[0]
    risky = [f for f in chosen if f in drill.CUTS_OFF]
    if risky and not yes and target not in whole.lab:
        raise BadInput(
            f"--faults {','.join(risky)} can cut {target} off its network; add --yes to drill "
            "it on a node outside the lab."
        )
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    code = _drill(inventory, name, chosen, target, duration_s, json_path, junit_path,
                  variables, forks, verbosity, fast, connection, console,
                  list(whole.hosts))  # fmt: skip
    raise SystemExit(code)


def _drill(
    inventory: Path, name: str | None, chosen: list[str], target: str, duration_s: int,
    json_path: Path | None, junit_path: Path | None, variables: dict[str, Any],
    forks: int | None, verbosity: int, fast: bool, connection: runner.Connection,
    console: Console, hosts: list[str],
) -> int:  # fmt: skip
    def request(limit: str | None, more: dict[str, Any], quick: bool = fast) -> runner.RunRequest:
        return job_request(inventory, limit, forks, {**variables, **more}, verbosity, quick,
                        connection)  # fmt: skip

    asked = ask_passwords(request(None, {}))
    connection = asked.connection
    own = name is None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    job_name = name or f"drill-{stamp}"
    started = time.monotonic()
    where = f"job {job_name}" + (f" on {target}" if own else f" ({len(hosts)} node(s))")
    console.print(f"nodeprep drill: faults {', '.join(chosen)} on {target}, {where}",
                  markup=False)  # fmt: skip
    found: list[dict[str, Any]] = []
    code = EXIT_OK
    try:
        if own:
            console.print(f"  starting job {job_name} (reference trainer, paced)", markup=False)
            result = runner.run(request(target, {**OWN_JOB_VARS, "job_name": job_name,
                                                 "nodeprep_job_action": "run"}))  # fmt: skip
            if result.exit_code != EXIT_OK:
                console.print(f"nodeprep drill: job {job_name} did not start: {_why(result)}",
                              markup=False)  # fmt: skip
                return _code(result)
        for index, fault in enumerate(chosen, start=1):
            console.print(f"  [{index}/{len(chosen)}] {fault} on {target} ...", markup=False)
            began = time.monotonic()
            # Ansible's reboot waits for the new boot over plain ssh (mitogen's connection
            # does not outlive a reboot), so --fast does not apply to it.
            result = runner.run(request(target, {
                "job_name": job_name, "nodeprep_job_action": "drill", "job_drill_fault": fault,
                "job_drill_id": f"{job_name}-{index}-{fault}" if own else
                f"{job_name}-{stamp}-{index}-{fault}",
                "job_drill_duration_s": duration_s,
            }, fast and fault != "reboot"))  # fmt: skip
            drills = [{**j["drill"], "host": j["host"]} for j in result.jobs if "drill" in j]
            if result.exit_code != EXIT_OK or not drills:
                console.print(f"nodeprep drill: {fault} on {target}: {_why(result)}",
                              markup=False)  # fmt: skip
                code = _code(result) if result.failures else EXIT_FAILED
                break
            drills[0]["seconds"] = round(time.monotonic() - began, 1)
            found.append(drills[0])
            _say(console, drills[0])
    finally:
        if own:
            stopped = runner.run(request(target, {"job_name": job_name,
                                                  "nodeprep_job_action": "stop"}))  # fmt: skip
            still = [j["host"] for j in stopped.jobs if j.get("still_running")]
            if stopped.exit_code != EXIT_OK or still:
                console.print(f"nodeprep drill: job {job_name} did not stop on {target}: "
                              f"{_why(stopped) if stopped.failures else 'still running'}",
                              markup=False)  # fmt: skip
                code = max(code, EXIT_UNREACHABLE if stopped.unreachable_hosts else EXIT_FAILED)
    about: dict[str, Any] = {"job": job_name, "node": target}
    if own and code == EXIT_OK and found:
        about["final_state"], code = _replay(console, runner.run(request(target, {
            "job_name": job_name, "nodeprep_job_action": "replay"})))  # fmt: skip
    return _report(console, found, len(chosen), code, time.monotonic() - started, about,
                   json_path, junit_path)  # fmt: skip


def _replay(console: Console, result: runner.RunResult) -> tuple[dict[str, Any], int]:
    """The replay's verdict on the drill's own job (bit-exact with an uninterrupted run to the
    same step, or not) and the exit code it leaves: 1 when the states differ or it failed."""
    facts = next((j["replay"] for j in result.jobs if "replay" in j), None)
    if result.exit_code != EXIT_OK or facts is None:
        why = _why(result) if result.failures else "no result"
        console.print(f"nodeprep drill: the replay failed: {why}", markup=False)
        return {"bit_exact": None, "detail": f"the replay failed: {why}"}, _code(result)
    console.print(f"  final state: {facts.get('detail')}", markup=False)
    return facts, EXIT_FAILED if facts.get("bit_exact") is False else EXIT_OK


def _report(
    console: Console, found: list[dict[str, Any]], asked: int, code: int, seconds: float,
    about: dict[str, Any], json_path: Path | None, junit_path: Path | None,
) -> int:  # fmt: skip
    """The table, JSON and JUnit of the drills that ran (and of the own job's replay); the
    exit code."""
    checks = [_check(f) for f in found]
    final = about.get("final_state")
    if isinstance(final, dict):
        exact = final.get("bit_exact")
        verdict = "pass" if exact else "fail" if exact is False or "failed" in str(
            final.get("detail")) else "skip"  # fmt: skip
        checks.append(report.CheckResult(about["node"], "drill.final_state", verdict,
                                         str(final.get("detail") or ""),
                                         float(final.get("seconds") or 0)))  # fmt: skip
    built = report.Report(results=checks)
    built.seconds = seconds
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in COLUMNS:
        table.add_column(column, no_wrap=True)
    for row in found:
        table.add_row(*_row(row))
    console.print(table)
    if code == EXIT_OK:
        code = built.exit_code
    if json_path is not None:
        write_json(json_path, {**about, "exit_code": code, "drills": found})
    if junit_path is not None:
        junit_path.parent.mkdir(parents=True, exist_ok=True)
        junit_path.write_text(report.to_junit(built, "nodeprep drill"))
    failed = [f["fault"] for f in found if _verdict(f) == "fail"]
    failed += [
        "final state" for c in checks if c.check == "drill.final_state" and c.status == "fail"
    ]
    skipped = [f["fault"] for f in found if _verdict(f) == "skip"]
    ran = len(found) - len(skipped)
    verdict = f"FAILED ({', '.join(failed)})" if failed else "PASSED" if ran else "NOT RUN"
    also = f", {len(skipped)} skipped ({', '.join(skipped)})" if skipped else ""
    console.print(f"nodeprep drill: {verdict}: {ran} of {asked} drill(s) ran{also} in "
                  f"{seconds:.0f} s", markup=False)  # fmt: skip
    return code


def _say(console: Console, found: dict[str, Any]) -> None:
    problems = "; ".join(found.get("problems") or [])
    verdict = {"pass": "passed", "skip": "skipped"}.get(_verdict(found), f"FAILED: {problems}")
    console.print(f"      {found.get('detail')}: {verdict}", markup=False)
