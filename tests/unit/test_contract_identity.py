"""contract.py's trainer identity: what register() records and how records are judged.

Real processes throughout: a registered trainer is a child that called register(); an
unrelated process is a ``sleep``. Nothing here sends a signal other than to clean up.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nodeprep import contract
from nodeprep.contract import IgnoreReason

BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
CHILD = """
import sys, time
from pathlib import Path
from nodeprep import contract
run_dir = Path(sys.argv[2])
run_dir.mkdir(parents=True, exist_ok=True)
contract.register(run_dir, time.time(), Path(sys.argv[1]))
(run_dir / "ready").write_text("1")
if sys.argv[3] == "unregister":
    contract.unregister(Path(sys.argv[1]))
    (run_dir / "unregistered").write_text("1")
time.sleep(60)
"""
Starter = Callable[..., subprocess.Popen[bytes]]


def _wait(predicate: Callable[[], object], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _trainer(spawn: Starter, registry: Path, run_dir: Path, mode: str = "stay") -> int:
    proc = spawn(sys.executable, "-c", CHILD, str(registry), str(run_dir), mode)
    _wait((run_dir / ("unregistered" if mode == "unregister" else "ready")).exists, "register")
    return proc.pid


def _sleeper(spawn: Starter, name: str = "sleep") -> int:
    proc = spawn(name, "60")
    _wait(lambda: contract.start_ticks(proc.pid) is not None, "sleep to start")
    return proc.pid


def _record(registry: Path, pid: int, **identity: object) -> Path:
    registry.mkdir(parents=True, exist_ok=True)
    path = registry / f"{pid}.json"
    path.write_text(json.dumps({"pid": pid, "run_dir": "/x", "started_at": 1.0, **identity}))
    return path


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait(5)
    return proc.pid


def test_register_records_start_time_and_boot_id(spawn: Starter, tmp_path: Path) -> None:
    registry = tmp_path / "trainers"
    pid = _trainer(spawn, registry, tmp_path / "run")
    entry = contract.Registration.from_json((registry / f"{pid}.json").read_text())
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert entry.pid == pid
    assert entry.start_ticks == int(fields[19])  # field 22: the 20th after the comm
    assert entry.boot_id == BOOT_ID
    scan = contract.scan_registry(registry)
    assert (scan.trainers, scan.ignored) == ([entry], [])
    assert contract.registered_trainers(registry) == [entry]


def test_old_and_unreadable_records_are_ignored_and_kept(spawn: Starter, tmp_path: Path) -> None:
    registry = tmp_path / "trainers"
    old = _record(registry, _sleeper(spawn))
    entry = contract.Registration.from_json(old.read_text())
    assert (entry.start_ticks, entry.boot_id) == (None, None)
    junk = registry / "77.json"
    junk.write_text('{"pid": ')
    scan = contract.scan_registry(registry)
    assert scan.trainers == []
    # Sorted on both sides: the sleeper's pid decides whether its name sorts before "77.json".
    assert sorted((r.path.name, r.reason, r.removed) for r in scan.ignored) == sorted(
        [
            (old.name, IgnoreReason.NO_IDENTITY, False),
            ("77.json", IgnoreReason.UNREADABLE, False),
        ]
    )
    assert old.exists()
    assert junk.exists()


def test_start_time_parse_survives_spaces_and_parens_in_comm(
    spawn: Starter, tmp_path: Path
) -> None:
    line = "4321 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 99 100"
    assert contract.parse_start_ticks(line) == 4242
    assert contract.parse_start_ticks("4321 (no close paren S 1 2") is None
    assert contract.parse_start_ticks("4321 (short) S 1 2") is None
    weird = tmp_path / "sl) (ee p"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", weird)
    pid = _sleeper(spawn, str(weird))
    stat = Path(f"/proc/{pid}/stat").read_text()
    assert "(sl) (ee p)" in stat
    ticks = contract.start_ticks(pid)
    now = time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK")
    mine = contract.start_ticks(os.getpid())
    assert ticks is not None
    assert mine is not None
    assert mine <= ticks <= now + 1
    assert stat.split()[21] != str(ticks)  # a naive split reads the wrong field


def test_scan_removes_dead_reused_and_other_boot_records(spawn: Starter, tmp_path: Path) -> None:
    registry = tmp_path / "trainers"
    reused_pid, other_pid = _sleeper(spawn), _sleeper(spawn)
    reused_ticks, other_ticks = contract.start_ticks(reused_pid), contract.start_ticks(other_pid)
    assert reused_ticks is not None
    reused = _record(registry, reused_pid, start_ticks=reused_ticks + 1, boot_id=BOOT_ID)
    other = _record(registry, other_pid, start_ticks=other_ticks, boot_id="not-this-boot")
    dead = _record(registry, _dead_pid(), start_ticks=1, boot_id=BOOT_ID)
    scan = contract.scan_registry(registry)
    assert scan.trainers == []
    assert {r.path.name: (r.reason, r.removed) for r in scan.ignored} == {
        reused.name: (IgnoreReason.PID_REUSED, True),
        other.name: (IgnoreReason.OTHER_BOOT, True),
        dead.name: (IgnoreReason.DEAD_PID, True),
    }
    assert list(registry.iterdir()) == []


def test_hidden_proc_falls_back_to_the_trainers_lock(spawn: Starter, tmp_path: Path) -> None:
    """What the watchdog's unit sees (ProtectProc=invisible, ProcSubset=pid): no /proc."""
    registry, hidden = tmp_path / "trainers", tmp_path / "empty-proc"
    hidden.mkdir()
    genuine = _trainer(spawn, registry, tmp_path / "run")
    gone = _trainer(spawn, registry, tmp_path / "run2", mode="unregister")
    stranger = _sleeper(spawn)
    unlocked = _record(registry, stranger, start_ticks=contract.start_ticks(stranger), boot_id="b")
    dead = _record(registry, _dead_pid(), start_ticks=5, boot_id="b")
    scan = contract.scan_registry(registry, proc=hidden)
    assert [t.pid for t in scan.trainers] == [genuine]
    assert {r.path.name: r.reason for r in scan.ignored} == {
        unlocked.name: IgnoreReason.PID_REUSED,
        dead.name: IgnoreReason.DEAD_PID,
    }
    assert not (registry / f"{gone}.json").exists()
    entry = scan.trainers[0]
    assert contract.confirm(entry, registry, proc=hidden) is None
    assert contract.confirm(entry, registry) is None  # and with /proc visible


@contextmanager
def _unprivileged() -> Iterator[None]:
    """Run the block as nobody (when root) so that unlink in a root-owned dir fails."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)


def test_a_stale_record_that_cannot_be_removed_is_ignored_without_error(spawn: Starter) -> None:
    work = Path(tempfile.mkdtemp(prefix="nodeprep-contract-"))  # not under a 0700 tmp_path
    try:
        work.chmod(0o755)
        registry = work / "trainers"
        pid = _sleeper(spawn)
        stale = _record(registry, pid, start_ticks=(contract.start_ticks(pid) or 0) + 1)
        registry.chmod(0o555 if os.geteuid() != 0 else 0o755)
        with _unprivileged():
            scan = contract.scan_registry(registry)
            with pytest.raises(PermissionError):
                stale.unlink()
        assert [(r.reason, r.removed) for r in scan.ignored] == [(IgnoreReason.PID_REUSED, False)]
        assert stale.exists()
    finally:
        if (work / "trainers").is_dir():
            (work / "trainers").chmod(0o755)
        shutil.rmtree(work)
