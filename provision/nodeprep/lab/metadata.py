"""The cloud metadata stand-in inside a lab node (a FAKE: see cloud_standin.py).

The heartbeat looks for a cloud's metadata service at 169.254.169.254. A lab node is a QEMU
VM, so nothing answers there; `up` serves the stand-in at that address on a dummy interface,
as a systemd service (not in a login session: the ssh-drop drill ends those) that is
enabled, so that it is there again after a reboot, as a cloud's metadata service is (the
reboot drill). The heartbeat, provisioned afterwards with ``heartbeat_cloud``, then composes
its notice probe against it, and the `preempt` drill posts a notice through the record the
stand-in keeps (cloud_standin.RECORD). A notice ends with the boot (it lives in /run).
`down` removes all of it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from nodeprep.lab import cloud_standin
from nodeprep.lab.errors import LabError, LabInputError
from nodeprep.lab.ssh import SshTarget, run_ssh

ADDRESS = "169.254.169.254"
IFACE = "npmeta0"
UNIT = "nodeprep-lab-metadata"
DEST = "/var/lib/nodeprep/lab/cloud_standin.py"
UNIT_FILE = f"/etc/systemd/system/{UNIT}.service"
NOTICE_FILE = "/run/nodeprep/lab/cloud-notice"
PROVIDERS = ("aws", "gcp", "azure")


def up(target: SshTarget, provider: str) -> str:
    """Serve the stand-in for PROVIDER on the node; returns its URL."""
    if provider not in PROVIDERS:
        raise LabInputError(
            f"provider {provider!r} has no stand-in; choose one of {', '.join(PROVIDERS)}."
        )
    source = Path(cloud_standin.__file__).read_text()
    script = "\n".join([
        "set -e",
        f"sudo mkdir -p {shlex.quote(str(Path(DEST).parent))}",
        f"sudo tee {DEST} >/dev/null <<'NODEPREP_STANDIN'\n{source}NODEPREP_STANDIN",
        f"sudo systemctl stop {UNIT} 2>/dev/null || true",
        f"sudo systemctl reset-failed {UNIT} 2>/dev/null || true",
        f"sudo rm -f {cloud_standin.RECORD}",  # one left by a stand-in that was killed
        f"sudo tee {UNIT_FILE} >/dev/null <<'NODEPREP_UNIT'\n{unit_text(provider)}NODEPREP_UNIT",
        "sudo systemctl daemon-reload",
        f"sudo systemctl enable --now --quiet {UNIT}",
        f"for i in $(seq 100); do test -e {cloud_standin.RECORD} && exit 0; sleep 0.1; done",
        f"echo 'the stand-in wrote no {cloud_standin.RECORD} within 10 s' >&2; exit 1",
    ])  # fmt: skip
    done = run_ssh(target, script, timeout_s=60)
    if done.returncode != 0:
        raise LabError(f"starting the metadata stand-in failed: {done.stderr.strip()[-400:]}")
    return f"http://{ADDRESS}"


def unit_text(provider: str) -> str:
    """The stand-in's unit: its address on the dummy interface, then the server, before the
    heartbeat starts at boot (so that its notice probe finds the service from the first)."""
    quiet = ">/dev/null 2>&1"
    iface = (f"ip link show {IFACE} {quiet} || ip link add {IFACE} type dummy; "
             f"ip addr replace {ADDRESS}/32 dev {IFACE}; ip link set {IFACE} up")  # fmt: skip
    return "\n".join([
        "# Written by `nodeprep lab metadata NODE up`; removed by `... down`.",
        "[Unit]",
        "Description=nodeprep lab: cloud metadata stand-in (a fake)",
        "Before=nodeprep-heartbeat.service",
        "",
        "[Service]",
        f"ExecStartPre=/bin/sh -c '{iface}'",
        f"ExecStart=/usr/bin/python3 {DEST} {provider} {ADDRESS} 80 {NOTICE_FILE}",
        f"ExecStopPost=/bin/rm -f {cloud_standin.RECORD}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])  # fmt: skip


def down(target: SshTarget) -> None:
    """Stop the stand-in and remove its unit, interface and files (each only where present)."""
    script = "; ".join([
        f"sudo systemctl disable --now --quiet {UNIT} 2>/dev/null",
        f"sudo systemctl reset-failed {UNIT} 2>/dev/null",
        f"sudo rm -f {UNIT_FILE}",
        "sudo systemctl daemon-reload",
        f"if ip link show {IFACE} >/dev/null 2>&1; then sudo ip link del {IFACE}; fi",
        f"sudo rm -f {DEST} {NOTICE_FILE} {cloud_standin.RECORD}",
        "true",
    ])  # fmt: skip
    done = run_ssh(target, script, timeout_s=60)
    if done.returncode != 0:
        raise LabError(f"removing the metadata stand-in failed: {done.stderr.strip()[-400:]}")
