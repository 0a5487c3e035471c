"""`nodeprep lab`: start, inspect, fault and remove disposable local VM nodes.

A thin layer: it parses and validates, calls nodeprep.lab, and turns lab errors into
click errors (exit 2 for bad input, 1 for a failed step).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from nodeprep.debmirror import MirrorNotFoundError
from nodeprep.lab import apptainer, faults, lifecycle, metadata
from nodeprep.lab.errors import LabError, LabInputError
from nodeprep.lab.inventory import render_ini
from nodeprep.lab.node import is_our_qemu
from nodeprep.lab.paths import cache_dir, lab_dir
from nodeprep.lab.recipe import DEFAULT_DISTRO, DISTROS
from nodeprep.lab.ssh import SshTarget

F = TypeVar("F", bound=Callable[..., Any])


class LabUsageError(click.ClickException):
    """Bad input to a lab command: nothing was changed."""

    exit_code = 2


class LabFailure(click.ClickException):
    """A lab step failed (build, boot, QMP)."""

    exit_code = 1


def lab_errors(func: F) -> F:
    """Map library errors to click errors with the right exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (LabInputError, MirrorNotFoundError) as error:
            raise LabUsageError(str(error)) from error
        except LabError as error:
            raise LabFailure(str(error)) from error

    return wrapper  # type: ignore[return-value]


def _progress_logging() -> None:
    """The lab's progress lines on stderr, each once: ``lab: ...``.

    Without ``propagate = False`` every line also reached the root handler that the
    command group installs (as ``INFO nodeprep.lab...: ...``): ancestors' handlers see a
    record whatever the ancestors' levels.
    """
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("lab: %(message)s"))
    root = logging.getLogger("nodeprep.lab")
    if not root.handlers:
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    root.propagate = False


@click.group(name="lab")
def lab() -> None:
    """Disposable Debian VM nodes under qemu: the default target and the role test bed.

    \b
    Examples:
      nodeprep lab up --nodes 2
      nodeprep lab inventory --output lab.ini
      nodeprep lab fault node1 link-down b0
      nodeprep lab down
    """


@lab.command()
@click.option("--nodes", type=click.IntRange(1, lifecycle.MAX_NODES), default=1, show_default=True)
@click.option("--distro", type=click.Choice(sorted(DISTROS)), default=DEFAULT_DISTRO,
              show_default=True, help="trixie is Debian 13, bookworm Debian 12.")  # fmt: skip
@click.option("--memory", "memory_mb", type=click.IntRange(512, 16384), default=1024,
              show_default=True, help="MiB of RAM per node.")  # fmt: skip
@click.option("--cpus", type=click.IntRange(1, 8), default=2, show_default=True)
@click.option("--fresh", is_flag=True, help="Boot from the image instead of the saved state.")
@lab_errors
def up(nodes: int, distro: str, memory_mb: int, cpus: int, fresh: bool) -> None:
    """Build the image if needed, then start NODES nodes reachable over SSH.

    \b
    Example: nodeprep lab up --nodes 2 --distro bookworm
    """
    _progress_logging()
    request = lifecycle.UpRequest(nodes, distro, memory_mb, cpus, fresh)
    state = lifecycle.up(request, lab_dir(), cache_dir())
    for node in state.nodes:
        click.echo(f"{node.name}: ssh port 127.0.0.1:{node.ssh_port} (pid {node.pid})")
    click.echo(f"accel: {state.accel}; inventory: {lab_dir() / lifecycle.INVENTORY_FILE}")


@lab.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@lab_errors
def status(as_json: bool) -> None:
    """Show the lab's nodes, ports, PIDs and whether their qemu runs."""
    state = lifecycle.running_state(lab_dir())
    rows = [
        {"node": n.name, "ssh_port": n.ssh_port, "pid": n.pid,
         "running": is_our_qemu(n.pid, n.files)}
        for n in state.nodes
    ]  # fmt: skip
    if as_json:
        click.echo(json.dumps({"accel": state.accel, "distro": state.distro, "nodes": rows}))
        return
    click.echo(f"distro {state.distro}, accel {state.accel}, image {state.image}")
    for row in rows:
        word = "running" if row["running"] else "STOPPED"
        click.echo(f"{row['node']:<8} {word:<8} port {row['ssh_port']:<6} pid {row['pid']}")


@lab.command(context_settings={"ignore_unknown_options": True})
@click.argument("node")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@lab_errors
def ssh(node: str, command: tuple[str, ...]) -> None:
    """Open a shell on NODE, or run COMMAND there.

    \b
    Example: nodeprep lab ssh node1 -- ip -br link
    """
    state = lifecycle.running_state(lab_dir())
    record = state.node(node)
    argv = SshTarget(record.ssh_port, Path(state.key)).argv(command, tty=not command)
    os.execvp(argv[0], argv)


@lab.command()
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the inventory here and print the path.")  # fmt: skip
@lab_errors
def inventory(output: Path | None) -> None:
    """Print the running lab's Ansible inventory, or write it to --output.

    \b
    Example: nodeprep provision "$(nodeprep lab inventory --output lab.ini)"
    """
    text = render_ini(lifecycle.running_state(lab_dir()))
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        output.write_text(text)
    except OSError as error:
        raise LabUsageError(
            f"Cannot write the inventory to {output} ({error.strerror}); choose a writable path."
        ) from error
    click.echo(str(output.resolve()))


@lab.command(name="apptainer-vars")
@click.argument("image", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Write the extra vars (JSON) here and print the path.")  # fmt: skip
@lab_errors
def apptainer_vars(image: Path, output: Path) -> None:
    """Write extra vars that make `nodeprep provision` apply the apptainer role to the lab:
    Apptainer from .debs sent by this machine (fetched once, sha256-checked) and IMAGE.

    \b
    Example:
      nodeprep build-image -o trainer.sif
      nodeprep lab apptainer-vars trainer.sif --output lab-apptainer.json
      nodeprep provision lab.ini -e @lab-apptainer.json
    """
    _progress_logging()
    variables = apptainer.provision_vars(lifecycle.running_state(lab_dir()), image)
    try:
        output.write_text(json.dumps(variables, indent=2) + "\n")
    except OSError as error:
        raise LabUsageError(
            f"Cannot write the vars to {output} ({error.strerror}); choose a writable path."
        ) from error
    click.echo(str(output.resolve()))


@lab.command()
@lab_errors
def down() -> None:
    """End the lab's qemu processes and remove its overlays, sockets and state."""
    ended = lifecycle.down(lab_dir())
    click.echo(f"lab down: ended {len(ended)} qemu process(es) {ended}; removed {lab_dir()}")


@lab.command()
@click.argument("node")
@click.argument("action", type=click.Choice(["link-down", "link-up", "disk-grow", "reset"]))
@click.argument("target", metavar="[NIC|SIZE]", required=False, default="")
@lab_errors
def fault(node: str, action: str, target: str) -> None:
    """Inject a fault into NODE: cut or restore a bond NIC (b0, b1) or the management NIC
    (mgmt: SSH to the node stalls until link-up), grow the data disk, or reset the node (a
    power cycle: no shutdown runs; it boots again).

    \b
    Examples:
      nodeprep lab fault node1 link-down b0
      nodeprep lab fault node1 link-down mgmt
      nodeprep lab fault node1 disk-grow 2G
      nodeprep lab fault node1 reset
    """
    record = lifecycle.running_state(lab_dir()).node(node)
    if action == "reset":
        if target:
            raise LabUsageError(f"reset takes no NIC or size (got {target!r}); give only NODE.")
        faults.reset(record)
        click.echo(f"{node}: reset (it boots again)")
        return
    if not target:
        raise LabUsageError(f"{action} needs a {'SIZE' if action == 'disk-grow' else 'NIC'}.")
    if action == "disk-grow":
        size = faults.grow_disk(record, faults.parse_size(target))
        click.echo(f"{node}: data disk grown to {size} bytes")
        return
    faults.set_link(record, target, up=action == "link-up")
    click.echo(f"{node}: {target} link {'up' if action == 'link-up' else 'down'}")


@lab.command(name="metadata")
@click.argument("node")
@click.argument("action", type=click.Choice(["up", "down"]))
@click.option("--provider", type=click.Choice(list(metadata.PROVIDERS)), default="aws",
              show_default=True,
              help="Whose metadata service the stand-in looks like.")  # fmt: skip
@lab_errors
def metadata_cmd(node: str, action: str, provider: str) -> None:
    """Serve a stand-in cloud metadata service inside NODE at 169.254.169.254 (a fake: no cloud
    account here), or remove it. Provision the heartbeat with heartbeat_cloud=PROVIDER after
    `up`, and it watches the stand-in's interruption notices; `nodeprep drill --faults
    preempt` posts one.

    \b
    Example:
      nodeprep lab metadata node1 up
      nodeprep provision lab.ini --tags heartbeat -e heartbeat_cloud=aws
      nodeprep drill lab.ini --name JOB --faults preempt
    """
    state = lifecycle.running_state(lab_dir())
    target = SshTarget(state.node(node).ssh_port, Path(state.key))
    if action == "down":
        metadata.down(target)
        click.echo(f"{node}: metadata stand-in removed")
        return
    url = metadata.up(target, provider)
    click.echo(f"{node}: {provider} metadata stand-in (a fake) serving at {url}")


if __name__ == "__main__":
    lab()
