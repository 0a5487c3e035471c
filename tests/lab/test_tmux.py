"""The tmux role on lab VMs: a real source build, reuse of that build, checks, logout survival.

A compile under software emulation takes the better part of an hour on 2 cores, so the
session's one source build runs where a fleet would put it: on a build node of the lab VM's
release. Here that is a container of the same Debian release, booted natively; it and the
VM share one build group, the container compiles, the build lands in the controller's
artifact cache and the VM unpacks it, as every other node of a fleet would. The same VM then
carries the rest of the story: its checks, a session that outlives its SSH login, a bad
checksum that keeps the old tmux, a broken config that fails its check. Every run here
uses the mitogen strategy (`provision --fast`); the chroot connection to the build node runs
as Ansible's own. The tarball is Debian's copy of the upstream release, served from
127.0.0.1 on the host (the container shares the host's network; VMs reach it through a
reverse SSH tunnel on the same port number).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_helpers import LabNode
from tmux_lab import CONVERGE, VERIFY, inventory, run_play, with_build_node

from nodeprep.lab.debsource import OrigTarball, fetch_orig_tarball
from nodeprep.lab.fileserve import reverse_tunnel, serve_directory
from nodeprep.lab.recipe import Recipe
from nspawn_node import Container, missing_tools, rootfs_tarball

pytestmark = [pytest.mark.lab, pytest.mark.timeout(1800)]

# The build's log: present where tmux was compiled, absent where a cached build was unpacked.
BUILD_LOGS = "ls /var/cache/nodeprep/tmux/ 2>/dev/null | grep -c '^build-.*[.]log$' || true"
USER = "nodeprep"
SHIPPED = "3.5a"  # the tmux_version whose checksum roles/tmux/defaults/main.yml ships


@pytest.fixture(scope="session")
def tmux_source(lab_cache: Path) -> OrigTarball:
    """Debian's copy of the release the role pins (Debian 13's tmux), fetched once and cached:
    the role's shipped checksum must verify it."""
    return fetch_orig_tarball("tmux", lab_cache / "sources", candidate=lambda name: (name, SHIPPED))


@pytest.fixture(scope="session")
def source_port(tmux_source: OrigTarball) -> Iterator[int]:
    with serve_directory(tmux_source.path.parent) as port:
        yield port


@pytest.fixture(scope="session")
def artifact_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Empty at the start of each session, so the first converge really compiles."""
    return tmp_path_factory.mktemp("tmux-artifacts")


@pytest.fixture
def build_node(tmp_path: Path) -> Iterator[Container]:
    """A booted container of the lab VM's Debian release, with the VM's login user."""
    why = missing_tools()
    assert why is None, why
    rootfs = rootfs_tarball(Recipe().distro, extra=("passwd",))
    box = Container.from_tarball(rootfs, tmp_path / "build-node")
    try:
        box.boot()
        box.sh(f"useradd --create-home {USER}")
        yield box
    finally:
        box.stop()


@pytest.fixture
def node(lab_node: LabNode, source_port: int) -> Iterator[LabNode]:
    """A lab node that reaches the tarball server at http://127.0.0.1:<source_port>/."""
    with reverse_tunnel(lab_node.target, source_port, source_port):
        yield lab_node


def role_vars(source: OrigTarball, port: int, cache: Path, **overrides: Any) -> dict[str, Any]:
    """The source build forced (the lab VM's own tmux would do for `auto`), verified by the
    role's shipped tmux_source_sha256: the test gives none."""
    return {
        "tmux_install_method": "source",
        "tmux_version": source.upstream_version,
        "tmux_source_url": f"http://127.0.0.1:{port}/{source.path.name}",
        "tmux_artifact_cache_dir": str(cache),
        "tmux_users": [USER],
        **overrides,
    }


def test_build_node_compiles_the_vm_unpacks_checks_pass_sessions_survive_logout(
    node: LabNode,
    build_node: Container,
    tmux_source: OrigTarball,
    source_port: int,
    artifact_cache: Path,
    tmp_path: Path,
) -> None:
    hosts = with_build_node(inventory(node, tmp_path), build_node, tmp_path)
    variables = role_vars(tmux_source, source_port, artifact_cache)
    assert not list(artifact_cache.iterdir())
    alone = inventory(node, tmp_path)
    before = run_play(VERIFY, alone, {}, tmp_path / "before", fast=True)
    assert before.result.exit_code == 0, before.messages()
    assert {check["status"] for check in before.checks().values()} == {"skip"}
    assert before.checks()["tmux.version"]["detail"] == "role tmux not applied on this node"
    _kill_user_processes_at_logout(node)

    started = time.monotonic()
    first = run_play(CONVERGE, hosts, variables, tmp_path / "first", fast=True)
    print(f"first converge (build node compiles, VM unpacks): {time.monotonic() - started:.0f} s")
    print(build_node.sh("tail -n 1 /var/cache/nodeprep/tmux/build-*.log", check=False).stdout)
    assert first.result.exit_code == 0, first.messages()
    # The build node compiled; the VM only unpacked the build it made.
    assert build_node.sh(BUILD_LOGS).stdout.strip() == "1"
    assert node.sh(BUILD_LOGS).strip() == "0"
    version = tmux_source.upstream_version
    assert build_node.sh("tmux -V").stdout.strip() == f"tmux {version}"
    assert node.sh("tmux -V").strip() == f"tmux {version}"
    assert node.sh("readlink /usr/local/bin/tmux").strip() == f"/opt/tmux-{version}/bin/tmux"
    artifacts = [path.name for path in artifact_cache.iterdir()]
    assert len(artifacts) == 1, artifacts
    assert artifacts[0].startswith(f"tmux-{version}-debian-{Recipe().distro}-x86_64-")

    started = time.monotonic()
    second = run_play(CONVERGE, hosts, variables, tmp_path / "second", fast=True)
    print(f"second converge: {time.monotonic() - started:.0f} s")
    assert second.result.exit_code == 0, second.messages()
    assert second.changed == 0, second.outcomes
    assert build_node.sh(BUILD_LOGS).stdout.strip() == "1"  # no second compile

    # The config is in effect in a real server: a command that fails keeps its pane and output
    # (tmux scrolls the output into history when it prints "Pane is dead", hence -S -).
    shown = node.sh(
        "tmux new-session -d -s drill 'echo boom; exit 3' && sleep 2 && "
        "tmux show-options -g remain-on-exit && tmux show-options -g history-limit && "
        "tmux list-panes -t drill -F 'dead=#{pane_dead} status=#{pane_dead_status}' && "
        "tmux capture-pane -p -S - -t drill; tmux kill-server"
    )
    assert "remain-on-exit on" in shown
    assert "history-limit 100000" in shown
    assert "dead=1 status=3" in shown
    assert "boom" in shown
    checks_pass_sessions_survive_logout(node, alone, variables, tmux_source, tmp_path)


def checks_pass_sessions_survive_logout(
    node: LabNode, hosts: Path, variables: dict[str, Any], source: OrigTarball, tmp_path: Path
) -> None:
    """On the VM alone: the checks pass, a session outlives its SSH login (logind kills user
    processes at logout here), a bad checksum keeps the old tmux, a broken config fails."""
    checks = run_play(VERIFY, hosts, {}, tmp_path / "after", fast=True).checks()
    statuses = {name: check["status"] for name, check in checks.items()}
    expected = ("tmux.version", "tmux.config", "tmux.linger", "tmux.logout_survival")
    assert statuses == dict.fromkeys(expected, "pass"), checks
    # Survival drill: a training loop in tmux, started over SSH; that SSH session ends.
    node.sh("tmux new-session -d -s train 'while :; do date +%s >> ~/train.log; sleep 0.5; done'")
    lines = int(node.sh("sleep 3; wc -l < ~/train.log"))
    assert _until(lambda: int(node.sh("wc -l < ~/train.log")) > lines + 4)
    assert "train" in node.sh("tmux list-sessions")

    _bad_checksum_keeps_the_old_tmux(node, hosts, variables, source, tmp_path)
    assert "train" in node.sh("tmux list-sessions")

    node.sh("sudo sed -i 's/^set-window-option -g remain-on-exit on/#/' /etc/tmux.conf")
    broken = run_play(VERIFY, hosts, {}, tmp_path / "broken", fast=True).checks()
    assert broken["tmux.config"]["status"] == "fail", broken
    assert '"remain-on-exit": "off"' in broken["tmux.config"]["detail"]
    assert broken["tmux.version"]["status"] == "pass"


def _kill_user_processes_at_logout(node: LabNode) -> None:
    """logind as a hardened distribution may ship it; proven by a process that dies at logout."""
    node.sh(
        "sudo mkdir -p /etc/systemd/logind.conf.d && printf '[Login]\\nKillUserProcesses=yes\\n'"
        " | sudo tee /etc/systemd/logind.conf.d/10-kill.conf"
        " && sudo systemctl restart systemd-logind"
    )
    node.sh("setsid sleep 900 </dev/null >/dev/null 2>&1 &")
    assert _until(lambda: node.sh(f"pgrep -u {USER} -x sleep || true").strip() == "")


def _bad_checksum_keeps_the_old_tmux(
    node: LabNode, hosts: Path, variables: dict[str, Any], source: OrigTarball, tmp_path: Path
) -> None:
    """`auto` where the distribution's tmux is too old builds from source; the checksum is
    wrong, so that build stops before anything is installed."""
    bad = {**variables, "tmux_install_method": "auto", "tmux_min_version": "9.9",
           "tmux_version": "9.9", "tmux_source_sha256": "0" * 64}  # fmt: skip
    failed = run_play(CONVERGE, hosts, bad, tmp_path / "bad", fast=True)
    assert failed.result.exit_code == 1
    assert "does not match tmux_source_sha256" in failed.messages(), failed.messages()
    assert "nothing was installed" in failed.messages()
    assert node.sh("tmux -V").strip() == f"tmux {source.upstream_version}"
    link = node.sh("readlink /usr/local/bin/tmux").strip()
    assert link == f"/opt/tmux-{source.upstream_version}/bin/tmux"
    assert "9.9" not in node.sh("ls /opt /var/cache/nodeprep/tmux")


def _until(check: Any, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    return bool(check())
