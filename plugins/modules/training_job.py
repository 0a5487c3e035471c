#!/usr/bin/python
"""Start, inspect and stop the training job of `nodeprep run` on one node."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.nodeprep.hardening.plugins.module_utils import drill as dr
from ansible_collections.nodeprep.hardening.plugins.module_utils import interconnect as ic
from ansible_collections.nodeprep.hardening.plugins.module_utils import job
from ansible_collections.nodeprep.hardening.plugins.module_utils.checkpoint_manifest import (
    CheckpointInvalidError,
    parse_name,
    verify,
)
from ansible_collections.nodeprep.hardening.plugins.module_utils.marker import (
    MARKER_DIR,
    read_marker,
)
from ansible_collections.nodeprep.hardening.plugins.module_utils.probe import probe

DOCUMENTATION = r"""
module: training_job
short_description: Start, inspect or stop a training job in a tmux session, inside an image.
description:
  - C(action=check) refuses, changing nothing, what would make a start fail or do harm - a
    job of the same name whose pane is still running (names the node and the session), an
    image that is missing or whose sha256 is not the expected one, a run directory whose
    filesystem has less free space than I(min_free_mb) - with C(nodeprep_refused=true).
  - C(action=start) writes C(launch.sh) and C(job.json) to I(run_dir) and starts the tmux
    session I(name) of I(user) running it - C(apptainer exec) of the image (C(--nv) where the
    node has an NVIDIA device) with torchrun inside (c10d rendezvous, I(nnodes),
    I(max_restarts), a rendezvous id derived from I(name)), output also appended to
    C(train.log). With I(boot_unit), a systemd unit starts the session, and starts it again
    at every boot until C(action=stop); its ExecStop (C(shutdown.sh), also written to
    I(run_dir)) sends SIGTERM to torchrun when the node shuts down or reboots, and waits for
    it, so that every rank saves first.
  - C(action=status) reports the job's state (running, restarting, finished, failed, stopped
    or absent), its tmux session, step, log, newest checkpoint and the heartbeat's state,
    under C(nodeprep_job).
  - C(action=stop) records the stop, removes the boot unit and sends SIGTERM to torchrun,
    which passes it to every rank (each saves an emergency checkpoint and exits 143); it
    waits I(stop_timeout_s) and reports what still runs, never killing it unless I(kill).
  - C(action=interconnect) is verify's check C(interconnect.allreduce), run on every selected
    node at once - torchrun (no restarts, I(nnodes) nodes, the c10d rendezvous of the other
    actions with the rendezvous id C(nodeprep-interconnect)) of C(python3 -m
    nodeprep.interconnect) inside the image, in the foreground, as I(user). It returns the
    check under C(nodeprep_job.check) - passed when the largest size's bus bandwidth is at least
    I(min_busbw_gbps) and the smallest size's time at most I(max_latency_ms); skipped with
    one node, or without an image and a launcher - and the figures under
    C(nodeprep_job.figures). Nothing is written on the node.
  - C(action=drill) injects one I(fault) on this node against the running job (C(kill) - a
    SIGKILL to one rank; C(netem) - delay and loss on the bond, else the default route's
    interface; C(link) - the bond's active member down; C(ssh-drop) - every login session of
    I(user) but the drill's own ended), watches the job's log while it lasts, undoes it, and
    returns under C(nodeprep_job.drill) what it cost (detected by whom and when, steps lost,
    time to the next step) and whether the node is as it was. The undo is armed first as a
    systemd timer (C(nodeprep-drill-undo-ID)) that fires I(duration_s) + 5 s later, so it
    runs even when this module or its controller is lost. A fault that cannot apply here is
    refused with C(nodeprep_refused=true), changing nothing. C(reboot) takes two calls around
    the caller's reboot of the node (see I(reboot_phase)); it needs the job's boot unit
    enabled, and it has nothing to undo.
options:
  action:
    description: What to do.
    type: str
    choices: [check, start, status, stop, interconnect, drill]
    required: true
  name:
    description: The job name; also the tmux session's name and part of the unit's.
    type: str
    required: true
  user:
    description: The user the session and the job run as.
    type: str
    required: true
  run_dir:
    description: The job's directory (logs, checkpoints, job.json).
    type: path
    required: true
  image:
    description: The image; empty for the one the apptainer role recorded.
    type: path
    default: ""
  image_sha256:
    description: The image's expected sha256; empty for the one recorded with the image.
    type: str
    default: ""
  exec_options:
    description: Options of C(apptainer exec); null for the ones the apptainer role recorded.
    type: list
    elements: str
  nv:
    description: C(--nv) - C(auto) where the node has /dev/nvidia0.
    type: str
    choices: [auto, "yes", "no"]
    default: auto
  launcher:
    description: A command that replaces C(apptainer exec IMAGE) (no image is then checked).
    type: list
    elements: str
    default: []
  binds:
    description: Paths bound into the image besides I(run_dir).
    type: list
    elements: str
    default: []
  command:
    description: torchrun's script and arguments (e.g. C(-m nodeprep.trainer --run-dir ...)).
    type: list
    elements: str
    default: []
  env:
    description: The job's environment.
    type: dict
    default: {}
  nnodes:
    description: torchrun's C(--nnodes), N or MIN:MAX.
    type: str
    default: "1"
  nproc_per_node:
    description: Processes on each node.
    type: int
    default: 1
  max_restarts:
    description: torchrun's C(--max-restarts).
    type: int
    default: 3
  rdzv_host:
    description: The address of the node that hosts the c10d store.
    type: str
    default: 127.0.0.1
  rdzv_port:
    description: Its port.
    type: int
    default: 29400
  local_addr:
    description: torchrun's C(--local-addr) - this node's address on the training network
      (the workers' store is found there when this node is rank 0); empty for its hostname.
      When it equals O(rdzv_host) this node hosts the c10d store (C(--rdzv-conf is_host));
      C(GLOO_SOCKET_IFNAME) and C(NCCL_SOCKET_IFNAME) default to the interface holding it,
      and a node where no interface holds it is refused.
    type: str
    default: ""
  shutdown_timeout_s:
    description: Seconds torchrun lets ranks save after SIGTERM before SIGKILL.
    type: int
    default: 120
  nodes:
    description: The job's nodes, for job.json.
    type: list
    elements: str
    default: []
  min_free_mb:
    description: Refuse to start when the run directory's filesystem has less free space.
    type: int
    default: 1024
  boot_unit:
    description: Start the session through a systemd unit enabled for boot.
    type: bool
    default: true
  tmux:
    description: The tmux binary.
    type: str
    default: tmux
  stop_timeout_s:
    description: Seconds C(stop) waits for the job to end.
    type: int
    default: 180
  kill:
    description: C(stop) with SIGKILL to every process of the job (the explicit hard stop).
    type: bool
    default: false
  heartbeat_metrics_path:
    description: The heartbeat's Prometheus textfile, for its state in C(status) and what the
      C(disk-full) and C(preempt) drills read of it.
    type: path
    default: /var/lib/prometheus/node-exporter/nodeprep_heartbeat.prom
  heartbeat_config:
    description: The heartbeat's config; the C(preempt) drill finds its notice probe there,
      the C(disk-full) drill its free-space probes and the volumes it may grow.
    type: path
    default: /etc/nodeprep/heartbeat.json
  image_checked:
    description: C(start) does not hash the image again (a C(check) of this run just did).
    type: bool
    default: false
  marker_dir:
    description: Where the roles' markers are (the apptainer role's names the image).
    type: path
    default: /etc/nodeprep/roles
  sizes:
    description: C(interconnect) - the all-reduce message sizes, in bytes.
    type: list
    elements: int
    default: [4096, 1048576, 16777216]
  iters:
    description: C(interconnect) - timed rounds per size (after two untimed ones).
    type: int
    default: 10
  min_busbw_gbps:
    description: C(interconnect) - the least bus bandwidth at the largest size, in Gbit/s; 0
      does not check it.
    type: float
    default: 0
  max_latency_ms:
    description: C(interconnect) - the most time the smallest size may take, in ms; 0 does not
      check it.
    type: float
    default: 0
  timeout_s:
    description: C(interconnect) - seconds the rendezvous and the measurement may take, each;
      C(drill) - seconds to wait for the job to step before the fault and after it.
    type: int
    default: 180
  fault:
    description: C(drill) - the fault.
    type: str
    choices: [kill, preempt, link, netem, disk-full, ssh-drop, reboot]
  drill_id:
    description: C(drill) - names the undo's transient unit; letters, digits, C(-), C(_).
    type: str
    default: ""
  duration_s:
    description: C(drill) - seconds the fault lasts (C(link), C(netem), C(ssh-drop)).
    type: int
    default: 20
  netem_delay_ms:
    description: C(drill) - netem's added delay.
    type: int
    default: 50
  netem_loss_pct:
    description: C(drill) - netem's packet loss.
    type: float
    default: 1.0
  reboot_phase:
    description: C(drill) of C(reboot) - C(arm) records what the job reached (in
      /var/lib/nodeprep/drills, which outlives the boot) before the caller reboots the node;
      C(judge), after the boot, measures how the job came back and removes the record.
    type: str
    choices: [arm, judge]
    default: arm
  prepare:
    description: C(interconnect) - only say whether this node can take part
      (C(nodeprep_job.ready)), and if not, its check; when it can, the command that measures
      (C(nodeprep_job.argv), run as root); nothing is started.
    type: bool
    default: false
  measured:
    description: C(interconnect) - what the command of I(prepare) did when a task ran it
      (C(rc), C(stdout), C(stderr) and C(msg) of an C(async_status) result); the module then
      only judges it. verify runs the command as an Ansible C(async) task of
      M(ansible.builtin.command), which Mitogen's strategy runs too, where an C(async) task
      of this module does not finish.
    type: dict
notes:
  - Runs as root (become); the session runs as I(user).
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Start the job.
  nodeprep.hardening.training_job:
    action: start
    name: pretrain
    user: train
    run_dir: /data/nodeprep/jobs/pretrain
    nnodes: "2"
    rdzv_host: 10.0.0.11
    command: [-m, nodeprep.trainer, --run-dir, /data/nodeprep/jobs/pretrain, --steps, "1000"]
"""

RETURN = r"""
nodeprep_job:
  description: What the action found or did on this node (state, session, step, log_age_s,
    checkpoint, emergency, heartbeat, tail, stopped, still_running, problem).
  returned: always
  type: dict
nodeprep_job.check:
  description: C(interconnect) - the check's result (check, passed, detail, skip).
  returned: with action=interconnect
  type: dict
nodeprep_job.ready:
  description: C(interconnect) - whether this node can take part (image, address).
  returned: with action=interconnect
  type: bool
nodeprep_job.argv:
  description: C(interconnect) - the command that measures on this node (run it as root), or
    an empty list where the node cannot take part.
  returned: with action=interconnect, without I(measured)
  type: list
  elements: str
nodeprep_job.figures:
  description: C(interconnect) - what the measurement printed (backend, ranks, nodes, and
    per size bytes, time_ms, algbw_gbps, busbw_gbps), or null.
  returned: with action=interconnect
  type: dict
nodeprep_refused:
  description: True when C(check) refused to start (the message says why).
  returned: on refusal
  type: bool
"""

SAFE_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}\$?$")


class Node:
    """One node's view of the job: paths, the user, and tmux as that user."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.name: str = self.p["name"]
        self.run_dir: str = self.p["run_dir"]
        self.host = os.uname()[1]
        try:
            self.account = pwd.getpwnam(self.p["user"])
        except KeyError:
            module.fail_json(
                msg="user {} does not exist on {}; set job_user to the training user.".format(
                    self.p["user"], self.host
                ),
                nodeprep_refused=True,
                nodeprep_job={},
            )
            raise SystemExit(1) from None

    def path(self, name: str) -> str:
        return os.path.join(self.run_dir, name)

    def as_user(self, argv: list[str]) -> list[str]:
        if os.geteuid() == self.account.pw_uid:
            return argv
        env = ["HOME=" + self.account.pw_dir, "USER=" + self.account.pw_name]
        return ["runuser", "-u", self.account.pw_name, "--", "env", *env, *argv]

    def tmux(self, *args: str) -> tuple[int, str, str]:
        return probe(self.module, self.as_user([self.p["tmux"], *list(args)]))

    def pane(self) -> dict[str, Any] | None:
        """The session's first pane (pid, dead, exit status), or None without a session."""
        rc, out, _ = self.tmux(
            "list-panes", "-t", f"={self.name}:", "-F",
            "#{pane_pid} #{pane_dead} #{pane_dead_status}",
        )  # fmt: skip
        if rc != 0 or not out.strip():
            return None
        fields = out.split("\n")[0].split()
        status = int(fields[2]) if len(fields) > 2 and fields[2].lstrip("-").isdigit() else None
        return {"pid": int(fields[0]), "dead": fields[1] == "1", "status": status}


def image_facts(node: Node) -> dict[str, Any]:
    """The image, its expected sha256 and exec options (given, else the apptainer marker)."""
    p = node.p
    found = read_marker("apptainer", p["marker_dir"])
    data = found.get("data") or {}
    image = p["image"] or str(data.get("image_path") or "")
    expected = p["image_sha256"] or (str(data.get("image_sha256") or "") if not p["image"] else "")
    options = p["exec_options"]
    if options is None:
        options = [str(o) for o in data.get("exec_options") or []]
    return {"image": image, "sha256": expected, "exec_options": options}


HASH_CACHE = "/var/lib/nodeprep/image-sha256.json"


def sha256_of(path: str, cache: str = HASH_CACHE) -> str:
    """The file's sha256, hashed once per version of the file: the result is kept with the
    file's device, inode, size, mtime and ctime (ctime cannot be set back by a user), and
    reused while all of them match. A 367 MB image took some 25 s to hash on a lab node."""
    st = os.stat(path)
    key = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    known = job.read_json(cache) or {}
    entry = known.get(path)
    if isinstance(entry, dict) and entry.get("stat") == key and entry.get("sha256"):
        return str(entry["sha256"])
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    known[path] = {"stat": key, "sha256": digest.hexdigest()}
    if os.geteuid() == 0:  # only root's record is trusted (and only root can write there)
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        write_file(cache, json.dumps(known, indent=1, sort_keys=True) + "\n", 0o644, 0, 0)
    return digest.hexdigest()


def squashfuse() -> bool:
    """Whether Apptainer finds squashfuse here (to mount a SIF for a user other than root)."""
    bundled = ("/usr/libexec/apptainer/bin", "/usr/local/libexec/apptainer/bin")
    return any(
        shutil.which(name) or any(os.access(os.path.join(d, name), os.X_OK) for d in bundled)
        for name in ("squashfuse_ll", "squashfuse")
    )


def refuse(node: Node, msg: str) -> None:
    node.module.fail_json(msg=msg, nodeprep_refused=True, nodeprep_job={"host": node.host})


def check(node: Node) -> dict[str, Any]:
    """Every refusal, before anything is written: returns the image facts (and the interface
    that holds local_addr) for start."""
    p = node.p
    pane = node.pane()
    if pane is not None and not pane["dead"]:
        refuse(node, f"job {node.name} is already running on {node.host} (tmux session "
               f"{node.name} of {p['user']}); stop it with nodeprep stop, or give another "
               "--name.")  # fmt: skip
    facts = image_facts(node)
    image = facts["image"]
    if not p["launcher"]:
        if not image:
            refuse(node, f"no image on {node.host}: apply the apptainer role with "
                   "apptainer_image_src, or give --image PATH.")  # fmt: skip
        if not os.path.isfile(image):
            refuse(node, f"image {image} is missing on {node.host}; give --image the path of "
                   "the image on the node, or apply the apptainer role.")  # fmt: skip
        if facts["sha256"] and not p["image_checked"]:
            actual = sha256_of(image)
            if actual != facts["sha256"]:
                refuse(node, f"image {image} on {node.host} has sha256 {actual}, not the "
                       f"expected {facts['sha256']}; provision the image again or give the "
                       "right --image-sha256.")  # fmt: skip
    if not p["launcher"] and node.account.pw_uid != 0 and not squashfuse():
        refuse(node, f"apptainer on {node.host} cannot mount {image} for {p['user']} "
               "(squashfuse is not installed) and would unpack the whole image at every start; "
               "install squashfuse on the node, or set job_user to root.")  # fmt: skip
    facts["ifname"] = interface_of(node, p["local_addr"]) if p["local_addr"] else ""
    if p["local_addr"] and not facts["ifname"]:
        refuse(node, f"job_address {p['local_addr']} is not an address of {node.host}; set "
               "job_address to its address on the network between the nodes.")  # fmt: skip
    where = node.run_dir
    while not os.path.exists(where):
        where = os.path.dirname(where)
    stat = os.statvfs(where)
    free_mb = stat.f_bavail * stat.f_frsize // (1 << 20)
    if free_mb < p["min_free_mb"]:
        refuse(node, f"the run directory {node.run_dir} on {node.host} has {free_mb} MiB free, "
               f"under the {p['min_free_mb']} MiB minimum; free space there, give another "
               "--run-dir, or lower job_min_free_mb.")  # fmt: skip
    return facts


def interface_of(node: Node, address: str) -> str:
    """The interface that holds ADDRESS on this node ('lo' for loopback), or ''."""
    rc, out, _ = probe(node.module, ["ip", "-o", "addr", "show", "to", address])
    fields = out.split() if rc == 0 else []
    return fields[1] if len(fields) > 1 else ""


def write_file(path: str, text: str, mode: int, uid: int, gid: int) -> None:
    """Write PATH atomically (a temporary file beside it, fsync, rename)."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".nodeprep-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.chown(tmp, uid, gid)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def run_or_fail(node: Node, argv: list[str], what: str) -> str:
    rc, out, err = probe(node.module, argv)
    if rc != 0:
        node.module.fail_json(
            msg=f"{what} failed on {node.host} (exit {rc}): {(err or out).strip()}",
            nodeprep_job={"host": node.host},
        )
    return out


def start(node: Node) -> dict[str, Any]:
    p = node.p
    facts = check(node)
    uid, gid = node.account.pw_uid, node.account.pw_gid
    os.makedirs(node.run_dir, exist_ok=True)
    os.chown(node.run_dir, uid, gid)
    for stale in ("stop.json", "exit.json"):
        if os.path.exists(node.path(stale)):
            os.unlink(node.path(stale))
    pane = node.pane()
    if pane is not None:  # check() refused a live one: this is a dead pane of an earlier run
        node.tmux("kill-session", "-t", f"={node.name}")
    nv = p["nv"] == "yes" or (p["nv"] == "auto" and os.path.exists("/dev/nvidia0"))
    binds = [node.run_dir, *list(p["binds"])]
    prefix = job.launcher(facts["image"], facts["exec_options"], nv, binds, p["launcher"] or None)
    spec = dict(p, env=dict(p["env"]))
    if facts["ifname"]:  # gloo and NCCL's sockets on the network the rendezvous uses
        spec["env"].setdefault("GLOO_SOCKET_IFNAME", facts["ifname"])
        spec["env"].setdefault("NCCL_SOCKET_IFNAME", facts["ifname"])
    argv = prefix + job.torchrun_argv(spec)
    script = node.path("launch.sh")
    write_file(script, job.launch_script(spec, argv), 0o755, uid, gid)
    spec["image"] = "" if p["launcher"] else facts["image"]
    write_file(node.path("job.json"), job.job_record(spec, argv, facts["sha256"], time.time()),
               0o644, uid, gid)  # fmt: skip
    start_argv = job.tmux_start_argv(p["tmux"], node.name, script)
    unit = job.unit_name(node.name)
    if p["boot_unit"]:
        write_file(node.path(job.SHUTDOWN_NAME), job.shutdown_script(spec), 0o755, uid, gid)
        unit_path = os.path.join("/etc/systemd/system", unit)
        write_file(unit_path, job.unit_text(spec, start_argv), 0o644, 0, 0)
        run_or_fail(node, ["systemctl", "daemon-reload"], "systemctl daemon-reload")
        run_or_fail(node, ["systemctl", "enable", unit], f"systemctl enable {unit}")
        # restart: a oneshot unit that stayed active from an earlier run starts again.
        run_or_fail(node, ["systemctl", "restart", unit], f"systemctl restart {unit}")
    else:
        run_or_fail(node, node.as_user(start_argv), f"starting tmux session {node.name}")
    pane = node.pane()
    return {"host": node.host, "state": job.RUNNING if pane and not pane["dead"] else job.FAILED,
            "session": pane is not None, "unit": unit if p["boot_unit"] else "",
            "command": argv, "run_dir": node.run_dir}  # fmt: skip


def _committed(root: str) -> list[str]:
    """The names of the committed checkpoints in ROOT (OSError where ROOT cannot be read)."""
    return [name for name in os.listdir(root)
            if parse_name(name) and os.path.isdir(os.path.join(root, name))]  # fmt: skip


def _newest_first(name: str) -> tuple[int, bool, str]:
    step, layer = parse_name(name) or (-1, "")
    return step, layer == "full", layer


def _judged(root: str, name: str, now: float) -> dict[str, Any]:
    """Checkpoint NAME in ROOT, verified against its manifest."""
    step, layer = parse_name(name) or (-1, "")
    where = os.path.join(root, name)
    try:
        verify(Path(where))
        problem = ""
    except CheckpointInvalidError as exc:
        problem = str(exc)
    return {"step": step, "layer": layer, "name": name, "age_s": job.age(where, now),
            "verified": not problem, "problem": problem}  # fmt: skip


def newest_checkpoint(run_dir: str, now: float) -> dict[str, Any] | None:
    root = os.path.join(run_dir, "checkpoints")
    try:
        names = _committed(root)
    except OSError:
        return None
    return _judged(root, max(names, key=_newest_first), now) if names else None


def checkpoint_facts(run_dir: str, name: str) -> dict[str, Any] | None:
    """Checkpoint NAME of the run ("": the newest), verified, with its size and the smallest
    committed checkpoint's (a drill sizes a fill by them); OSError when one goes meanwhile."""
    root = os.path.join(run_dir, "checkpoints")
    names = _committed(root) if os.path.isdir(root) else []
    if not names:
        return None
    sizes = {}
    for entry in names:
        where = os.path.join(root, entry)
        sizes[entry] = sum(os.path.getsize(os.path.join(where, f)) for f in os.listdir(where))
    chosen = name or max(names, key=_newest_first)
    return {**_judged(root, chosen, time.time()), "bytes": sizes.get(chosen, 0),
            "smallest": min(sizes.values())}  # fmt: skip


def heartbeat_state(node: Node) -> str:
    _rc, out, _ = probe(node.module, ["systemctl", "is-active", "nodeprep-heartbeat"])
    active = out.strip() or "unknown"
    if active != "active":
        return active
    try:
        with open(node.p["heartbeat_metrics_path"], encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return "active"
    found = re.search(r'^nodeprep_heartbeat_node_state\{state="([a-z]+)"\} 1(\.0)?$', text, re.M)
    return found.group(1) if found else "active"


def status(node: Node) -> dict[str, Any]:
    now = time.time()
    pane = node.pane()
    lines = job.log_tail(node.path(job.LOG_NAME), 400)
    facts, tail = job.log_facts(lines), lines[-job.TAIL_LINES :]
    exit_record = job.read_json(node.path("exit.json"))
    stop_record = job.read_json(node.path("stop.json"))
    known = os.path.exists(node.path("job.json"))
    state = job.judge_state(
        pane is not None, bool(pane and pane["dead"]), pane["status"] if pane else None,
        exit_record, stop_record, facts, known,
    )  # fmt: skip
    records = []
    for line in job.log_tail(node.path("emergency.jsonl"), 1):
        with contextlib.suppress(ValueError):
            records.append(json.loads(line))
    emergency = records[-1] if records else None
    return {
        "host": node.host,
        "state": state,
        "session": pane is not None,
        "pane_dead": bool(pane and pane["dead"]),
        "exit_code": (pane or {}).get("status") if pane and pane["dead"] else
        (exit_record or {}).get("exit_code"),
        "step": facts["step"],
        "log_age_s": job.age(node.path(job.LOG_NAME), now),
        "checkpoint": newest_checkpoint(node.run_dir, now) if known else None,
        "emergency": emergency,
        "heartbeat": heartbeat_state(node),
        "boot_unit": os.path.exists(os.path.join("/etc/systemd/system",
                                                 job.unit_name(node.name))),
        "tail": tail if state in (job.FAILED, job.RESTARTING) else tail[-3:],
        "run_dir": node.run_dir,
    }  # fmt: skip


def stop(node: Node) -> dict[str, Any]:
    p = node.p
    began = time.time()
    if os.path.isdir(node.run_dir):
        record = json.dumps({"time": began, "kill": p["kill"]}) + "\n"
        write_file(node.path("stop.json"), record, 0o644, node.account.pw_uid,
                   node.account.pw_gid)  # fmt: skip
    unit = job.unit_name(node.name)
    unit_path = os.path.join("/etc/systemd/system", unit)
    changed = False
    if os.path.exists(unit_path):
        probe(node.module, ["systemctl", "disable", unit])
        os.unlink(unit_path)
        probe(node.module, ["systemctl", "daemon-reload"])
        changed = True
    pane = node.pane()
    signalled: list[int] = []
    if pane is not None and not pane["dead"]:
        below = job.descendants(pane["pid"])
        targets = [*below, pane["pid"]] if p["kill"] else job.agents(pane["pid"])[:1]
        if not targets:  # not a torchrun job: its own command gets the SIGTERM
            targets = [pane["pid"]]
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL if p["kill"] else signal.SIGTERM)
                signalled.append(pid)
            except ProcessLookupError:
                pass
        changed = True
    deadline = began + p["stop_timeout_s"]
    while signalled and time.time() < deadline:
        pane = node.pane()
        if pane is None or pane["dead"]:
            break
        time.sleep(0.5)
    result = status(node)
    pane = node.pane()
    result.update({
        "signalled": signalled,
        "signal": "SIGKILL" if p["kill"] else "SIGTERM",
        "still_running": bool(pane and not pane["dead"]),
        "stop_seconds": round(time.time() - began, 1),
    })  # fmt: skip
    result["changed"] = changed
    return result


def _drill_job(node: Node) -> dr.Job:
    """The running job as a drill sees it, from this module's own view of the node."""
    spec = job.read_json(node.path("job.json")) or {}
    command = [str(arg) for arg in spec.get("command") or []]

    def alive() -> bool:
        pane = node.pane()
        return bool(pane and not pane["dead"])

    def workers() -> list[int]:
        pane = node.pane()
        if pane is None or pane["dead"]:
            return []
        agents = job.agents(pane["pid"])
        return job.children(agents[-1]) if agents else []

    def committed() -> int | None:
        # Names only: verifying a checkpoint would read it while the job trains.
        try:
            names = os.listdir(os.path.join(node.run_dir, "checkpoints"))
        except OSError:
            return None
        steps = [parsed[0] for parsed in map(parse_name, names) if parsed]
        return max(steps) if steps else None

    def emergencies() -> int:
        try:
            with open(node.path("emergency.jsonl"), "rb") as handle:
                return sum(1 for _ in handle)
        except OSError:
            return 0

    def sessions() -> set[str]:
        pane = node.pane()
        held = dr.session_of(pane["pid"]) if pane else ""
        return {held} if held else set()

    def newest(name: str) -> dict[str, Any] | None:
        for _ in range(3):  # retention may remove a checkpoint while it is read: look again
            try:
                return checkpoint_facts(node.run_dir, name)
            except OSError:
                time.sleep(0.2)
        return None

    return dr.Job(node.run_dir, node.account.pw_name, dr.checkpoint_every(command), alive,
                  workers, committed, emergencies, sessions, newest)  # fmt: skip


def terminate(node: Node) -> list[int]:
    """SIGTERM to torchrun, as a preemption (and `nodeprep stop`) sends it: every rank saves
    an emergency checkpoint and exits 143. No stop is recorded: the boot unit stays."""
    pane = node.pane()
    if pane is None or pane["dead"]:
        return []
    targets = job.agents(pane["pid"])[:1] or [pane["pid"]]
    signalled = []
    for pid in targets:
        try:
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
        except ProcessLookupError:
            pass
    return signalled


def revive_script(node: Node) -> str:
    """Shell that starts the job's session again when it is dead or gone (as the boot unit
    does at boot), and does nothing while it runs or once `nodeprep stop` recorded a stop.
    Without a boot unit the session starts in a transient unit that keeps it (KillMode=
    process), not in the caller's cgroup: the undo timer's own service ends when it exits."""
    tmux = node.as_user([node.p["tmux"]])
    panes = shlex.join([*tmux, "list-panes", "-t", f"={node.name}:", "-F", "#{pane_dead}"])
    kill = shlex.join([*tmux, "kill-session", "-t", f"={node.name}"])
    unit = job.unit_name(node.name)
    transient = unit.replace(".service", "-revived")
    start = shlex.join([
        "systemd-run", "--quiet", f"--unit={transient}", f"--uid={node.account.pw_name}",
        "--property=Type=oneshot", "--property=RemainAfterExit=yes",
        "--property=KillMode=process", f"--working-directory={node.run_dir}",
        *job.tmux_start_argv(node.p["tmux"], node.name, node.path("launch.sh")),
    ])  # fmt: skip
    return (
        f"[ -e {shlex.quote(node.path('stop.json'))} ] || "
        f'if [ "$({panes} 2>/dev/null | head -n 1)" != 0 ]; then {kill} 2>/dev/null; '
        f"rm -f {shlex.quote(node.path('exit.json'))}; "
        f"if [ -e /etc/systemd/system/{unit} ]; then systemctl restart {unit}; "
        f"else systemctl stop {transient} 2>/dev/null; systemctl reset-failed {transient} "
        f"2>/dev/null; {start}; fi; fi"
    )


def drill(node: Node) -> dict[str, Any]:
    """One fault against the running job; a fault that cannot apply here is refused."""
    p = node.p
    if not p["fault"] or not re.match(r"^[A-Za-z0-9_-]{1,200}$", p["drill_id"]):
        node.module.fail_json(msg="action=drill needs a fault and a drill_id of letters, digits, "
                              "'-' or '_'.", nodeprep_refused=True, nodeprep_job={})  # fmt: skip
    pane = node.pane()
    after_boot = p["fault"] == "reboot" and p["reboot_phase"] == "judge"  # the unit starts it
    if (pane is None or pane["dead"]) and not after_boot:
        node.module.fail_json(msg=f"job {node.name} is not running on {node.host} (see `nodeprep "
                              "status`); a drill needs a running job.", nodeprep_refused=True,
                              nodeprep_job={})  # fmt: skip
    target = _drill_job(node)
    duration, timeout = float(p["duration_s"]), float(p["timeout_s"])
    # The faults that need nothing but the job, the drill's id and its times.
    plain = {"kill": dr.drill_kill, "link": dr.drill_link, "blackhole": dr.drill_blackhole,
             "ssh-drop": dr.drill_ssh_drop}  # fmt: skip
    try:
        if p["fault"] in plain:
            result = plain[p["fault"]](target, p["drill_id"], duration, timeout)
        elif p["fault"] == "netem":
            result = dr.drill_netem(target, p["drill_id"], duration, timeout,
                                    p["netem_delay_ms"], p["netem_loss_pct"])  # fmt: skip
        elif p["fault"] == "disk-full":
            result = dr.drill_disk_full(target, p["drill_id"], duration, timeout,
                                        p["heartbeat_metrics_path"],
                                        p["heartbeat_config"])  # fmt: skip
        elif p["fault"] == "preempt":
            if pane is None or not job.agents(pane["pid"]):
                raise dr.DrillError(
                    f"job {node.name} runs no torchrun agent here, so a SIGTERM could not reach "
                    "every rank the way a reclaim's does; the preempt drill needs a job that "
                    "`nodeprep run` started."
                )
            result = dr.drill_preempt(target, p["drill_id"], duration, timeout,
                                      lambda: terminate(node), revive_script(node),
                                      p["heartbeat_config"], dr.STANDIN_RECORD,
                                      p["heartbeat_metrics_path"])  # fmt: skip
        else:  # reboot
            unit = job.unit_name(node.name)
            _rc, out, _ = probe(node.module, ["systemctl", "is-enabled", unit])
            enabled = out.strip() == "enabled"
            if p["reboot_phase"] == "arm":
                armed = dr.drill_reboot_arm(target, p["drill_id"], timeout, unit, enabled)
                return {"host": node.host, "reboot_armed": armed}
            result = dr.drill_reboot_judge(target, p["drill_id"], timeout, unit, enabled)
    except dr.DrillError as exc:
        node.module.fail_json(msg=f"{node.host}: {exc}", nodeprep_refused=True,
                              nodeprep_job={"host": node.host})  # fmt: skip
        raise
    return {"host": node.host, "drill": result}


def _trainer_run(node: Node, argv: list[str], env: dict[str, str], timeout: int) -> dict[str, Any]:
    """Run ARGV as the job's user with the job's environment, in a session of its own so that
    a timeout ends all of it (torchrun, the image's processes, the ranks); what its trainer
    said (job.replay_facts), or a DrillError."""
    pairs = [f"{key}={value}" for key, value in sorted(env.items())]
    with subprocess.Popen(
        node.as_user(["env", *pairs, *argv]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, cwd=node.run_dir, start_new_session=True,
        env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "LANG": "C.UTF-8",
             "HOME": node.account.pw_dir},
    ) as proc:  # fmt: skip
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise dr.DrillError(f"the replay did not finish within {timeout} s") from None
    facts = job.replay_facts(out)
    if proc.returncode != 0 or facts is None:
        tail = out.strip().splitlines()[-3:]
        raise dr.DrillError(f"the replay exited {proc.returncode}: {' | '.join(tail)}")
    return facts


def replay(node: Node) -> dict[str, Any]:
    """Whether the stopped job's final state is bit-exact with an uninterrupted run: the
    reference trainer twice, in the job's image with its world size, both to the step of the
    job's newest checkpoint (which must verify and be full: a light one restarts the optimizer).
    One resumes the job's own run directory and must train nothing (its state hash is the
    job's), one trains afresh in RUN_DIR/replay (the uninterrupted run), removed after. Only
    for a stopped one-node job of the reference trainer."""
    spec = job.read_json(node.path("job.json")) or {}
    pane = node.pane()
    if pane is not None and not pane["dead"]:
        raise dr.DrillError(f"job {node.name} is still running; the replay compares a stopped one.")
    command = [str(a) for a in spec.get("command") or []]
    nproc = int(spec.get("nproc_per_node") or 1)
    fresh = node.path("replay")
    one_node = str(spec.get("nnodes", "1")) in ("1", "1:1")
    if job.replay_argv(command, nproc, fresh, 1) is None or not one_node:
        why = "not the reference trainer on one node: nothing to replay"
        return {"host": node.host, "replay": {"bit_exact": None, "detail": why}}
    newest = newest_checkpoint(node.run_dir, time.time())
    if newest is None or not newest["verified"] or newest["layer"] != "full":
        raise dr.DrillError(f"job {node.name}'s newest checkpoint in {node.run_dir} is not a full "
                            f"one that verifies ({newest}); nothing to compare.")  # fmt: skip
    step = int(newest["step"])
    env = {str(k): str(v) for k, v in (spec.get("env") or {}).items()}
    timeout = int(node.p["timeout_s"])
    began = time.time()
    shutil.rmtree(fresh, ignore_errors=True)
    try:
        # Made by the job's user (the run directory is theirs); the trainers register with no
        # heartbeat while they replay (their own registry in it).
        run_or_fail(node, node.as_user(["mkdir", "-p", os.path.join(fresh, "registry")]),
                    "creating the replay directory")  # fmt: skip
        env["NODEPREP_RUN_DIR"] = os.path.join(fresh, "registry")
        mine = _trainer_run(node, job.replay_argv(command, nproc, node.run_dir, step) or [],
                            env, timeout)  # fmt: skip
        alone = _trainer_run(node, job.replay_argv(command, nproc, fresh, step) or [], env,
                             timeout)  # fmt: skip
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    if (mine["start"], mine["resumed"], mine["done"]) != (step, True, step):
        raise dr.DrillError(f"the replay of the job's own run did not resume at step {step} and "
                            f"end there: it started at {mine['start']} (resumed "
                            f"{mine['resumed']}) and ended at {mine['done']}.")  # fmt: skip
    if (alone["start"], alone["resumed"], alone["done"]) != (0, False, step):
        raise dr.DrillError(
            f"the uninterrupted replay did not train from step 0 to {step}: it started at "
            f"{alone['start']} and ended at {alone['done']}."
        )
    same = mine["sha256"] == alone["sha256"]
    detail = (f"the job's state at step {step} {'equals' if same else 'DIFFERS FROM'} an "
              f"uninterrupted run's to that step (sha256 {mine['sha256'][:12]}"
              f"{'' if same else ' against ' + alone['sha256'][:12]})")  # fmt: skip
    return {"host": node.host, "replay": {
        "bit_exact": same, "step": step, "job_sha256": mine["sha256"],
        "uninterrupted_sha256": alone["sha256"], "seconds": round(time.time() - began, 1),
        "detail": detail}}  # fmt: skip


def interconnect_argv(node: Node) -> tuple[list[str], dict[str, Any] | None]:
    """The measurement's command on this node, or why it cannot run here (a check result)."""
    p = node.p
    if len(p["nodes"]) < 2:
        return [], ic.result(False, "", "one node selected: no interconnect between nodes to "
                             "measure; select two or more")  # fmt: skip
    facts = image_facts(node)
    if not p["launcher"] and not facts["image"]:
        return [], ic.result(False, "", f"no trainer image on {node.host}: apply the apptainer "
                             "role, or set job_launcher")  # fmt: skip
    if not p["launcher"] and not os.path.isfile(facts["image"]):
        return [], ic.result(
            False,
            f"image {facts['image']} is missing on {node.host}; apply "
            "the apptainer role again, or set job_image to the image's path",
        )
    if not p["launcher"] and node.account.pw_uid != 0 and not squashfuse():
        return [], ic.result(False, f"apptainer on {node.host} cannot mount {facts['image']} "
                             f"for {p['user']} (squashfuse is not installed) and would unpack "
                             "the whole image first; install squashfuse on the node, or set "
                             "job_user to root")  # fmt: skip
    ifname = interface_of(node, p["local_addr"]) if p["local_addr"] else ""
    if p["local_addr"] and not ifname:
        return [], ic.result(False, f"job_address {p['local_addr']} is not an address of "
                             f"{node.host}; set job_address to its address on the network "
                             "between the nodes")  # fmt: skip
    nv = p["nv"] == "yes" or (p["nv"] == "auto" and os.path.exists("/dev/nvidia0"))
    prefix = job.launcher(facts["image"], facts["exec_options"], nv, [], p["launcher"] or None)
    timeout_s = int(p["timeout_s"])
    spec = dict(p, max_restarts=0, shutdown_timeout_s=10, rdzv_conf={"join_timeout": timeout_s},
                command=["-m", "nodeprep.interconnect", "--iters", str(p["iters"]),
                         "--sizes", ",".join(str(s) for s in p["sizes"]),
                         "--timeout-s", str(timeout_s)])  # fmt: skip
    env = {"PYTHONUNBUFFERED": "1", **{str(k): str(v) for k, v in p["env"].items()}}
    if ifname:  # gloo and NCCL's sockets on the network the rendezvous uses
        env.setdefault("GLOO_SOCKET_IFNAME", ifname)
        env.setdefault("NCCL_SOCKET_IFNAME", ifname)
    argv = ["timeout", "-k", "10", str(2 * timeout_s + 30),
            *node.as_user(["env", *(f"{k}={v}" for k, v in sorted(env.items())),
                           *prefix, *job.torchrun_argv(spec)])]  # fmt: skip
    return argv, None


def measure_interconnect(node: Node) -> dict[str, Any]:
    """verify's interconnect.allreduce on this node (see the module's description); with
    I(prepare), only whether this node can take part (``ready``) and the command that
    measures (``argv``), nothing started; with I(measured), the verdict on what that command
    did when something else ran it."""
    p = node.p
    if p["measured"] is not None:
        return judge_interconnect(node, p["measured"])
    argv, cannot = interconnect_argv(node)
    found: dict[str, Any] = {"host": node.host, "ready": cannot is None, "figures": None,
                             "check": cannot, "argv": argv}  # fmt: skip
    if cannot is not None or p["prepare"]:
        return found
    began = time.monotonic()
    rc, out, err = probe(node.module, argv)
    found.update(judge_interconnect(node, {"rc": rc, "stdout": out, "stderr": err}),
                 seconds=round(time.monotonic() - began, 1))  # fmt: skip
    return found


def judge_interconnect(node: Node, measured: dict[str, Any]) -> dict[str, Any]:
    """The check from the measuring command's exit status and output (I(measured): rc,
    stdout, stderr, and msg where the command never reported)."""
    p = node.p
    rc = ic.exit_status(measured.get("rc"))
    out, err = str(measured.get("stdout") or ""), str(measured.get("stderr") or "")
    msg = str(measured.get("msg") or "")
    figures = ic.figures_from(out)
    found: dict[str, Any] = {"host": node.host, "ready": True, "figures": figures}
    if rc == 0 and figures is not None:
        found["check"] = ic.judge(figures, float(p["min_busbw_gbps"]), float(p["max_latency_ms"]),
                                  len(p["nodes"]))  # fmt: skip
        return found
    if rc is None:
        said = f"the measurement did not report an exit status ({msg or 'no output'})"
    elif rc in (124, 137):
        said = "timed out"
    else:  # a command that could not start says why only in msg
        said = ic.why_failed(rc, out, err) if out.strip() or err.strip() or not msg else msg
    found["check"] = ic.result(
        False, f"the all-reduce among {len(p['nodes'])} nodes (rendezvous "
        f"{job.endpoint(p)}) failed on {node.host} (exit {rc}): {said}")  # fmt: skip
    return found


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "action": {
                "type": "str",
                "required": True,
                "choices": ["check", "start", "status", "stop", "interconnect", "drill", "replay"],
            },
            "name": {"type": "str", "required": True},
            "user": {"type": "str", "required": True},
            "run_dir": {"type": "path", "required": True},
            "image": {"type": "path", "default": ""},
            "image_sha256": {"type": "str", "default": ""},
            "exec_options": {"type": "list", "elements": "str"},
            "nv": {"type": "str", "default": "auto", "choices": ["auto", "yes", "no"]},
            "launcher": {"type": "list", "elements": "str", "default": []},
            "binds": {"type": "list", "elements": "str", "default": []},
            "command": {"type": "list", "elements": "str", "default": []},
            "env": {"type": "dict", "default": {}},
            "nnodes": {"type": "str", "default": "1"},
            "nproc_per_node": {"type": "int", "default": 1},
            "max_restarts": {"type": "int", "default": 3},
            "rdzv_host": {"type": "str", "default": "127.0.0.1"},
            "rdzv_port": {"type": "int", "default": 29400},
            "shutdown_timeout_s": {"type": "int", "default": 120},
            "local_addr": {"type": "str", "default": ""},
            "nodes": {"type": "list", "elements": "str", "default": []},
            "min_free_mb": {"type": "int", "default": 1024},
            "boot_unit": {"type": "bool", "default": True},
            "tmux": {"type": "str", "default": "tmux"},
            "stop_timeout_s": {"type": "int", "default": 180},
            "kill": {"type": "bool", "default": False},
            "heartbeat_metrics_path": {
                "type": "path",
                "default": "/var/lib/prometheus/node-exporter/nodeprep_heartbeat.prom",
            },
            "heartbeat_config": {"type": "path", "default": "/etc/nodeprep/heartbeat.json"},
            "marker_dir": {"type": "path", "default": MARKER_DIR},
            "image_checked": {"type": "bool", "default": False},
            "sizes": {"type": "list", "elements": "int", "default": [4096, 1 << 20, 16 << 20]},
            "iters": {"type": "int", "default": 10},
            "min_busbw_gbps": {"type": "float", "default": 0.0},
            "max_latency_ms": {"type": "float", "default": 0.0},
            "timeout_s": {"type": "int", "default": 180},
            "prepare": {"type": "bool", "default": False},
            "measured": {"type": "dict"},
            "fault": {"type": "str", "choices": list(dr.FAULTS)},
            "drill_id": {"type": "str", "default": ""},
            "duration_s": {"type": "int", "default": 20},
            "netem_delay_ms": {"type": "int", "default": 50},
            "netem_loss_pct": {"type": "float", "default": 1.0},
            "reboot_phase": {"type": "str", "default": "arm", "choices": ["arm", "judge"]},
        },
        supports_check_mode=False,
    )
    p = module.params
    try:
        job.check_name(p["name"])
        job.parse_nnodes(p["nnodes"])
    except job.JobError as exc:
        module.fail_json(msg=str(exc), nodeprep_refused=True, nodeprep_job={})
    if not os.path.isabs(p["run_dir"]):
        module.fail_json(msg=f"run_dir {p['run_dir']} is not absolute.", nodeprep_refused=True,
                         nodeprep_job={})  # fmt: skip
    if p["action"] == "interconnect":
        module.exit_json(changed=False, nodeprep_job=measure_interconnect(Node(module)))
    if shutil.which(p["tmux"]) is None and not os.path.isfile(p["tmux"]):
        module.fail_json(msg=f"tmux ({p['tmux']}) is not installed on {os.uname()[1]}; apply "
                         "the tmux role.", nodeprep_refused=True, nodeprep_job={})  # fmt: skip
    node = Node(module)
    action = p["action"]
    if action == "check":
        check(node)
        module.exit_json(changed=False, nodeprep_job={"host": node.host, "state": "checked"})
    elif action == "start":
        module.exit_json(changed=True, nodeprep_job=start(node))
    elif action == "status":
        module.exit_json(changed=False, nodeprep_job=status(node))
    elif action == "drill":
        module.exit_json(changed=True, nodeprep_job=drill(node))
    elif action == "replay":
        try:
            module.exit_json(changed=True, nodeprep_job=replay(node))
        except dr.DrillError as exc:
            module.fail_json(msg=f"{node.host}: {exc}", nodeprep_job={"host": node.host})
    else:
        result = stop(node)
        module.exit_json(changed=result.pop("changed"), nodeprep_job=result)


if __name__ == "__main__":
    main()
