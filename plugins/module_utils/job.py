"""A training job on one node, as `nodeprep run` starts it: files, commands and its state.

What the job is made of, all under its run directory (RUN_DIR):

- ``launch.sh``: the command of the tmux session. It runs the launcher (``apptainer exec``
  of the image) with ``python3 -m torch.distributed.run`` (torchrun) inside, its output
  appended to ``train.log`` as well as shown in the pane, and records how it ended in
  ``exit.json`` (written to a temporary file, then renamed).
- ``job.json``: everything needed to run the same job again (command, image and its sha256,
  environment, nodes, start time), rewritten at each start by ``nodeprep run``.
- ``stop.json``: written by ``nodeprep stop`` before it signals, so that the state reads
  "stopped", not "failed", and a boot does not start the job again.

Standard library and Python 3.8 only: this runs on the nodes as Ansible module_utils, and
the controller imports it too (``nodeprep.job``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from typing import Any

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$"
NAME_RULE = "1 to 48 letters, digits, '-' or '_', starting with a letter or digit"
NNODES_PATTERN = r"^([1-9][0-9]{0,3})(?::([1-9][0-9]{0,3}))?$"
LOG_NAME = "train.log"
TAIL_LINES = 12

# The torchrun module, as it appears in the agent's command line (how `stop` finds it).
TORCHRUN_MODULE = "torch.distributed.run"

# States `nodeprep status` reports.
RUNNING, RESTARTING, FINISHED, FAILED, STOPPED, ABSENT = (
    "running", "restarting", "finished", "failed", "stopped", "absent",
)  # fmt: skip

_STEP = re.compile(r"^step (\d+) ")
_DONE = re.compile(r"^done step=(\d+) ")
# torchrun's agent when a worker failed (it starts the group again while restarts are left),
# and the reference trainer's first line after a start.
_RESTART = re.compile(r"failed \(exitcode: |Restarting worker group")
_START = re.compile(r"^start step=(\d+) ")


class JobError(ValueError):
    """A value of a job that cannot work; ``str()`` is one sentence naming it and the fix."""


def unit_name(name: str) -> str:
    """The systemd unit that starts the job's tmux session at boot."""
    return f"nodeprep-job-{name}.service"


def rdzv_id(name: str) -> str:
    """The rendezvous id of job NAME: the same on every node, different for every job name."""
    return f"nodeprep-{name}"


def parse_nnodes(value: str) -> tuple[int, int]:
    """``N`` or ``MIN:MAX`` -> (min, max); JobError when it is neither or MIN > MAX."""
    found = re.match(NNODES_PATTERN, str(value).strip())
    if not found:
        raise JobError(
            f"--nnodes {value!r} is not N or MIN:MAX (whole numbers from 1); "
            "write it like 2 or 1:4."
        )
    low = int(found.group(1))
    high = int(found.group(2) or low)
    if low > high:
        raise JobError(f"--nnodes {value!r} has MIN above MAX; write MIN:MAX with MIN <= MAX.")
    return low, high


def check_name(name: str) -> None:
    if not re.match(NAME_PATTERN, str(name)):
        raise JobError(f"--name {name!r} is not a job name ({NAME_RULE}).")


def launcher(
    image: str, exec_options: list[str], nv: bool, binds: list[str], given: list[str] | None
) -> list[str]:
    """The command that runs torchrun: the one given, else ``apptainer exec`` of IMAGE."""
    if given:
        return list(given)
    argv = ["apptainer", "exec"] + (["--nv"] if nv else []) + list(exec_options)
    for path in binds:
        argv += ["--bind", path]
    return [*argv, image]


def endpoint(spec: dict[str, Any]) -> str:
    """The c10d store's HOST:PORT (an IPv6 address in brackets)."""
    host = str(spec["rdzv_host"])
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"{host}:{int(spec['rdzv_port'])}"


def torchrun_argv(spec: dict[str, Any]) -> list[str]:
    """torchrun with the job's rendezvous, restarts and shutdown grace, then the command;
    ``rdzv_conf`` (a dict), where given, adds to the rendezvous's settings."""
    is_host = rdzv_is_host(spec)
    conf = {"is_host": str(is_host).lower()} if is_host is not None else {}
    conf.update({str(k): str(v) for k, v in (spec.get("rdzv_conf") or {}).items()})
    return [
        "python3", "-m", TORCHRUN_MODULE,
        "--nnodes", str(spec["nnodes"]),
        "--nproc-per-node", str(spec["nproc_per_node"]),
        "--max-restarts", str(spec["max_restarts"]),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", endpoint(spec),
        "--rdzv-id", rdzv_id(spec["name"]),
        "--shutdown-timeout", str(int(spec["shutdown_timeout_s"])),
        *(["--local-addr", spec["local_addr"]] if spec.get("local_addr") else []),
        *(["--rdzv-conf", ",".join(f"{k}={v}" for k, v in conf.items())] if conf else []),
        *spec["command"],
    ]  # fmt: skip


TRAINER_MODULE = "nodeprep.trainer"
DONE = re.compile(r"^done step=(\d+) state_sha256=([0-9a-f]{64})$", re.M)
_BEGUN = re.compile(r"^start step=(\d+) resumed=(True|False)\b", re.M)
# Trainer flags a replay sets itself, or leaves out: where the run lives and ends, its pace
# and drills, and files it would write for the job.
_REPLAY_DROPS = ("--run-dir", "--until-step", "--min-step-s", "--drill-nan-at",
                 "--state-hash-out", "--final-state-out")  # fmt: skip


def replay_facts(out: str) -> dict[str, Any] | None:
    """What a reference trainer run said: the step it started at (and whether it resumed),
    the step it ended at and its final state's sha256; None where it did not say so."""
    begun, done = _BEGUN.search(out), DONE.search(out)
    if begun is None or done is None:
        return None
    return {"start": int(begun.group(1)), "resumed": begun.group(2) == "True",
            "done": int(done.group(1)), "sha256": done.group(2)}  # fmt: skip


def replay_argv(argv: list[str], nproc: int, run_dir: str, step: int) -> list[str] | None:
    """A job's command (job.json's, which runs the reference trainer under torchrun) made into
    one that trains the same run afresh in RUN_DIR up to STEP, unpaced, with a standalone
    rendezvous of the same world size on this node; None for a job that is not the
    reference trainer under torchrun. Pointed at the job's own run directory, it resumes
    from the job's checkpoint at STEP and trains nothing: its state hash is the job's."""
    try:
        at = next(i for i in range(len(argv) - 2)
                  if argv[i + 1 : i + 3] == ["-m", TORCHRUN_MODULE])  # fmt: skip
        start = next(i for i in range(at + 3, len(argv) - 1)
                     if argv[i : i + 2] == ["-m", TRAINER_MODULE])  # fmt: skip
    except StopIteration:
        return None
    trainer: list[str] = []
    rest = iter(argv[start:])
    for arg in rest:
        name = arg.split("=", 1)[0]
        if name in _REPLAY_DROPS:
            if "=" not in arg:
                next(rest, None)
            continue
        trainer.append(arg)
    return [*argv[: at + 3], "--standalone", "--nproc-per-node", str(nproc), *trainer,
            "--run-dir", run_dir, "--until-step", str(step)]  # fmt: skip


def rdzv_is_host(spec: dict[str, Any]) -> bool | None:
    """Whether this node's torchrun hosts the c10d store: it does when its own address is the
    endpoint. torchrun's own guess compares the endpoint with the addresses its hostname
    resolves to, which on many nodes (and the lab's) is 127.0.1.1: nobody would host it.
    None (torchrun guesses) when the node's address is not known."""
    local = str(spec.get("local_addr") or "")
    return str(spec["rdzv_host"]).strip("[]") == local.strip("[]") if local else None


def launch_script(spec: dict[str, Any], argv: list[str]) -> str:
    """launch.sh: the environment, the command teed into train.log, and exit.json at the end."""
    run_dir = spec["run_dir"]
    lines = [
        "#!/bin/bash",
        "# nodeprep job {}: written by `nodeprep run`; the tmux session {} runs it.".format(
            spec["name"], spec["name"]
        ),
        "# Started again at boot by {} until `nodeprep stop`.".format(unit_name(spec["name"])),
        "set -u -o pipefail",
        f"cd {shlex.quote(run_dir)} || exit 1",
    ]
    for key in sorted(spec["env"]):
        lines.append("export {}={}".format(key, shlex.quote(str(spec["env"][key]))))
    log = shlex.quote(os.path.join(run_dir, LOG_NAME))
    lines += [
        "printf '%s nodeprep: job {} starting (boot %s)\\n' \"$(date -Is)\" "
        '"$(cat /proc/sys/kernel/random/boot_id)" | tee -a {}'.format(spec["name"], log),
        f"{shlex.join(argv)} 2>&1 | tee -a {log}",
        "code=${PIPESTATUS[0]}",
        'printf \'%s nodeprep: job {} exited %d\\n\' "$(date -Is)" "$code" | tee -a {}'.format(
            spec["name"], log
        ),
        'printf \'{"exit_code": %d, "time": %s}\\n\' "$code" "$(date +%s)" '
        "> exit.json.tmp && mv -f exit.json.tmp exit.json",
        'exit "$code"',
    ]
    return "\n".join(lines) + "\n"


SHUTDOWN_NAME = "shutdown.sh"


def shutdown_script(spec: dict[str, Any]) -> str:
    """shutdown.sh, the boot unit's ExecStop: at the node's shutdown or reboot only, SIGTERM to
    torchrun (as `nodeprep stop` and a preemption send it) so that every rank saves an
    emergency checkpoint while the node still runs, then wait for it to exit. Without it the
    shutdown's last SIGTERM reaches every process at once: `tee` dies with the rest and the
    trainer, writing its next line into the broken pipe, ends before it saves (the reboot
    drill saw that: a checkpoint interval lost). A `systemctl stop` of the unit (or its
    restart) leaves the job alone, as KillMode=process does.

    The agent is found by the job's rendezvous id on its command line, wherever it runs: a
    session started while another tmux server of the user ran lives in that server's
    cgroup, not the unit's. Only the outermost match is signalled (apptainer's process, when
    the job runs in the image, passes it on), as `nodeprep stop` does."""
    return "\n".join([
        "#!/bin/bash",
        "# nodeprep job {}: written by `nodeprep run`; its unit's ExecStop.".format(spec["name"]),
        'state=$(systemctl is-system-running 2>/dev/null)',
        '[ "$state" = stopping ] || exit 0',
        "rdzv={}".format(shlex.quote(rdzv_id(spec["name"]))),
        "declare -A match=()",
        'for dir in /proc/[0-9]*; do',
        '  mapfile -d "" -t argv 2>/dev/null < "$dir/cmdline" || continue',
        '  [[ "${argv[*]}" == *' + TORCHRUN_MODULE + '* || "${argv[0]##*/}" == torchrun '
        '|| "${argv[1]##*/}" == torchrun ]] || continue',
        '  for ((i = 0; i + 1 < ${#argv[@]}; i++)); do',
        '    if [ "${argv[i]}" = --rdzv-id ] && [ "${argv[i+1]}" = "$rdzv" ]; then',
        '      match[${dir#/proc/}]=1; break',
        "    fi",
        "  done",
        "done",
        "agents=()",
        'for pid in "${!match[@]}"; do',  # outermost: no match among its ancestors
        "  up=$pid inner=",
        "  while up=$(awk '/^PPid:/ {print $2}' \"/proc/$up/status\" 2>/dev/null) "
        '&& [ -n "$up" ] && [ "$up" -gt 1 ]; do',
        '    if [ -n "${match[$up]:-}" ]; then inner=1; break; fi',
        "  done",
        '  [ -n "$inner" ] || agents+=("$pid")',
        "done",
        'if [ "${#agents[@]}" -eq 0 ]; then',
        '  echo "nodeprep: the node is shutting down; no torchrun agent of rendezvous $rdzv"',
        "  exit 0",
        "fi",
        'echo "nodeprep: the node is shutting down: SIGTERM to torchrun ${agents[*]}"',
        'kill -TERM "${agents[@]}" 2>/dev/null',
        'for pid in "${agents[@]}"; do while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done; done',
        "",
    ])  # fmt: skip


def tmux_start_argv(tmux: str, name: str, script: str) -> list[str]:
    """Create the detached session running SCRIPT; a failed run keeps its pane to read."""
    return [tmux, "new-session", "-d", "-s", name, "-x", "200", "-y", "50", script,
            ";", "set-option", "-w", "-t", f"={name}:", "remain-on-exit", "failed"]  # fmt: skip


def unit_text(spec: dict[str, Any], start_argv: list[str]) -> str:
    """The unit that recreates the session at boot (KillMode=process: stopping the unit
    never kills the tmux server, so `systemctl stop` cannot end a training run)."""
    return "\n".join([
        "# Written by `nodeprep run`; removed by `nodeprep stop`.",
        "[Unit]",
        f"Description=nodeprep training job {spec['name']} (tmux session of {spec['user']})",
        # dbus: the ExecStop's `systemctl is-system-running` (as the job's user) asks over it.
        "After=network-online.target nodeprep-heartbeat.service dbus.service",
        "Wants=network-online.target",
        # The run directory's filesystem (a data disk mounted with nofail) before the job.
        "RequiresMountsFor={}".format(spec["run_dir"]),
        "ConditionPathExists=!{}".format(os.path.join(spec["run_dir"], "stop.json")),
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=yes",
        "User={}".format(spec["user"]),
        "WorkingDirectory={}".format(spec["run_dir"]),
        "ExecStart={}".format(" ".join(_unit_quote(a) for a in start_argv)),
        # At shutdown only: SIGTERM to torchrun and a wait for every rank's emergency save.
        "ExecStop=/bin/bash {}".format(
            _unit_quote(os.path.join(spec["run_dir"], SHUTDOWN_NAME))
        ),
        "TimeoutStopSec={}".format(int(spec.get("shutdown_timeout_s") or 120) + 60),
        "KillMode=process",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])  # fmt: skip


def _unit_quote(arg: str) -> str:
    if arg == ";":
        return "\\;"
    if re.match(r"^[A-Za-z0-9_@%+=:,./-]+$", arg):
        return arg
    return '"{}"'.format(arg.replace("\\", "\\\\").replace('"', '\\"'))


def job_record(spec: dict[str, Any], argv: list[str], image_sha256: str, now: float) -> str:
    record = {
        "name": spec["name"],
        "user": spec["user"],
        "run_dir": spec["run_dir"],
        "command": argv,
        "image": spec.get("image", ""),
        "image_sha256": image_sha256,
        "env": spec["env"],
        "nodes": spec["nodes"],
        "nnodes": spec["nnodes"],
        "nproc_per_node": spec["nproc_per_node"],
        "max_restarts": spec["max_restarts"],
        "rdzv_endpoint": endpoint(spec),
        "rdzv_id": rdzv_id(spec["name"]),
        "started": now,
    }
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def log_tail(path: str, lines: int = TAIL_LINES, limit: int = 65536) -> list[str]:
    """The last LINES lines of the log (reads at most LIMIT bytes from its end)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line.rstrip("\r") for line in text.splitlines()][-lines:]


def log_facts(tail: list[str]) -> dict[str, Any]:
    """The newest step, whether the run printed its end, whether torchrun is restarting."""
    step, done, restarting = None, False, False
    for line in tail:
        found = _STEP.match(line)  # the reference trainer's "step N loss=... t=..."
        if found:
            step, restarting = int(found.group(1)), False
        elif _DONE.match(line):
            step, done = int(_DONE.match(line).group(1)), True  # type: ignore[union-attr]
        elif _START.match(line):
            step, restarting = int(_START.match(line).group(1)), False  # type: ignore[union-attr]
        elif _RESTART.search(line):
            restarting = True
    return {"step": step, "done": done, "restarting": restarting}


def judge_state(
    session: bool, pane_dead: bool, pane_status: int | None, exit_record: dict[str, Any] | None,
    stop_record: dict[str, Any] | None, facts: dict[str, Any], known: bool,
) -> str:  # fmt: skip
    """The job's state from what the node shows.

    launch.sh's exit.json says how the run ended (tmux's own exit status of a dead pane is
    the fallback: some releases leave it empty); stop.json makes an ended run "stopped".
    """
    if session and not pane_dead:
        return RESTARTING if facts.get("restarting") else RUNNING
    code = exit_record.get("exit_code") if exit_record is not None else None
    if code is None and session and pane_dead:
        code = pane_status
    if stop_record is not None:
        return STOPPED
    if code == 0:
        return FINISHED
    if code is not None:
        return FAILED
    return FAILED if known else ABSENT


def _parents(proc: str = "/proc") -> dict[int, list[int]]:
    """Each process's children, read from /proc/PID/stat's ppid."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc, entry, "stat"), encoding="utf-8") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        parents.setdefault(int(fields[1]), []).append(int(entry))
    return parents


def descendants(root: int, proc: str = "/proc") -> list[int]:
    """Every process below ROOT."""
    parents = _parents(proc)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in parents.get(pid, []):
            found.append(child)
            todo.append(child)
    return found


def children(pid: int, proc: str = "/proc") -> list[int]:
    """The direct children of PID (the ranks of a torchrun agent), lowest pid first."""
    return sorted(_parents(proc).get(pid, []))


def cmdline(pid: int, proc: str = "/proc") -> list[str]:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def agents(root: int, proc: str = "/proc") -> list[int]:
    """The torchrun agents below ROOT (the pane's process), outermost first."""
    found = []
    for pid in descendants(root, proc):
        argv = cmdline(pid, proc)
        if TORCHRUN_MODULE in argv or any(os.path.basename(a) == "torchrun" for a in argv[:2]):
            found.append(pid)
    return found


def age(path: str, now: float | None = None) -> float | None:
    """Seconds since PATH changed, at NOW; a change after NOW (the status read began, the job
    went on writing) is 0, not a negative age."""
    try:
        return max(0.0, round((now or time.time()) - os.stat(path).st_mtime, 1))
    except OSError:
        return None
