"""The trainer <-> heartbeat contract: where a trainer registers, and what it records.

Both sides import this module and neither imports the other, so the node-side
watchdog never needs torch and the trainer never needs the watchdog.

- A running trainer writes ``<registry>/<pid>.json`` (a :class:`Registration`)
  when it starts and removes it when it exits. The registry defaults to
  ``/run/nodeprep/trainers`` and is overridden by ``NODEPREP_RUN_DIR``.
- A trainer that is SIGKILLed leaves its file behind and its pid is later reused
  by an unrelated process, so a pid alone never identifies a trainer. The record
  also holds the process's identity: its start time in clock ticks since boot
  (field 22 of ``/proc/PID/stat``) and the kernel boot id. The trainer also holds
  an exclusive ``flock`` on its registration file for its lifetime, for readers
  that cannot see the trainer in ``/proc`` (the watchdog's unit runs with
  ``ProtectProc=invisible`` and ``ProcSubset=pid``, which hide other users'
  processes and ``/proc/sys``); the kernel drops the lock when the trainer dies.
- :func:`identity_mismatch` is the one place that decides whether a record still
  names its trainer; :func:`scan_registry` applies it to every record, removes the
  stale ones (dead pid, reused pid, other boot) and names every ignored record and
  why. Records without an identity (written before it existed) or unreadable ones
  are ignored and kept. Just before each signal the watchdog asks again
  (:func:`confirm`), through a pidfd where the kernel has them, so that a pid
  reused after the scan is never signalled.
- The watchdog sends ``EMERGENCY_SIGNAL`` (SIGUSR1) to a confirmed trainer to ask
  for an emergency checkpoint. The trainer only sets a flag in the handler and
  saves at the next step boundary.
- After the save commits, the trainer appends one JSON line (an
  :class:`EmergencyRecord`) to ``<run_dir>/emergency.jsonl``, which lets the
  watchdog report detection -> durable-checkpoint latency.
- Beside its registration the trainer publishes its progress at every step
  (``<pid>.progress``, see :mod:`nodeprep.progress`); a stale registration takes its
  progress file with it.
- ``STACKS_SIGNAL`` (SIGUSR2) makes a trainer write every thread's Python stack to
  :func:`stack_dump_path` (``faulthandler``: written from the signal handler itself, so
  a rank blocked inside a collective still answers). The watchdog sends it on a hang.
"""

from __future__ import annotations

import enum
import fcntl
import json
import logging
import os
import signal
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

EMERGENCY_SIGNAL = signal.SIGUSR1
STACKS_SIGNAL = signal.SIGUSR2
DEFAULT_REGISTRY = Path("/run/nodeprep/trainers")
EMERGENCY_LOG_NAME = "emergency.jsonl"
PROGRESS_SUFFIX = ".progress"
STACKS_DIR_NAME = "stacks"
PROC = Path("/proc")
_START_TIME_FIELD = 22  # of /proc/PID/stat, 1-based (proc(5))
_HELD_LOCKS: dict[Path, int] = {}  # registration file -> fd holding its flock


def registry_dir() -> Path:
    """The directory trainers register in (``NODEPREP_RUN_DIR`` overrides the default)."""
    override = os.environ.get("NODEPREP_RUN_DIR")
    return Path(override) / "trainers" if override else DEFAULT_REGISTRY


@dataclass(frozen=True)
class Registration:
    """What a running trainer publishes about itself.

    ``start_ticks`` and ``boot_id`` are ``None`` in records written before the
    identity existed; readers of the old format ignore the extra keys.
    """

    pid: int
    run_dir: str
    started_at: float
    start_ticks: int | None = None
    boot_id: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Registration:
        data = json.loads(text)
        ticks, boot = data.get("start_ticks"), data.get("boot_id")
        return cls(
            pid=int(data["pid"]),
            run_dir=str(data["run_dir"]),
            started_at=float(data["started_at"]),
            start_ticks=None if ticks is None else int(ticks),
            boot_id=None if boot is None else str(boot),
        )


class IgnoreReason(enum.Enum):
    """Why a registration is not treated as a live trainer (the metric's ``reason`` label)."""

    DEAD_PID = "dead_pid"
    PID_REUSED = "pid_reused"
    OTHER_BOOT = "other_boot"
    NO_IDENTITY = "no_identity"
    UNREADABLE = "unreadable"

    @property
    def stale(self) -> bool:
        """Stale records can never become valid again, so they are removed."""
        return self in (IgnoreReason.DEAD_PID, IgnoreReason.PID_REUSED, IgnoreReason.OTHER_BOOT)


@dataclass(frozen=True)
class Mismatch:
    """The verdict against a record: the reason and the evidence, for the log."""

    reason: IgnoreReason
    detail: str


@dataclass(frozen=True)
class IgnoredRecord:
    """One registration file that was ignored, and why.

    ``key`` names this version of the file (name, inode, mtime), so the watchdog can
    log and count a record that it cannot remove once, not at every scan.
    """

    path: Path
    pid: int | None
    reason: IgnoreReason
    detail: str
    removed: bool
    key: tuple[str, int, int]


@dataclass(frozen=True)
class RegistryScan:
    """The confirmed trainers and the ignored records of one pass over the registry."""

    trainers: list[Registration]
    ignored: list[IgnoredRecord] = field(default_factory=list)


@dataclass(frozen=True)
class EmergencyRecord:
    """One emergency checkpoint the trainer committed after a signal."""

    signal: str
    signal_time: float
    committed_time: float
    path: str
    step: int

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EmergencyRecord:
        data = json.loads(text)
        return cls(
            signal=str(data["signal"]),
            signal_time=float(data["signal_time"]),
            committed_time=float(data["committed_time"]),
            path=str(data["path"]),
            step=int(data["step"]),
        )


def register(run_dir: Path, started_at: float, registry: Path | None = None) -> Path:
    """Publish this process as a trainer; returns the registration file.

    The file appears atomically, already locked: the flock is taken on the temporary
    file before the rename and its descriptor stays open (close-on-exec) until
    :func:`unregister` or death, so there is no instant at which the record exists
    unlocked while the trainer lives.
    """
    target_dir = registry or registry_dir()
    target_dir.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    ticks = start_ticks(pid)
    if ticks is None:
        log.warning("cannot read /proc/%d/stat: the watchdog will not signal this trainer", pid)
    entry = Registration(pid, str(run_dir), started_at, start_ticks=ticks, boot_id=boot_id())
    path = target_dir / f"{pid}.json"
    fd, tmp = tempfile.mkstemp(dir=target_dir, prefix=".reg-")
    try:
        os.write(fd, entry.to_json().encode())
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    previous = _HELD_LOCKS.pop(path, None)
    _HELD_LOCKS[path] = fd
    if previous is not None:
        os.close(previous)
    return path


def unregister(registry: Path | None = None) -> None:
    """Remove this process's registration, then drop its lock (in that order, so a
    reader never finds the record unlocked while this trainer is alive)."""
    path = (registry or registry_dir()) / f"{os.getpid()}.json"
    path.unlink(missing_ok=True)
    fd = _HELD_LOCKS.pop(path, None)
    if fd is not None:
        os.close(fd)


def registered_trainers(registry: Path | None = None) -> list[Registration]:
    """The registrations whose process is confirmed to be the trainer that wrote them."""
    return scan_registry(registry).trainers


def scan_registry(registry: Path | None = None, proc: Path = PROC) -> RegistryScan:
    """Every record, judged by :func:`identity_mismatch`; stale ones are removed.

    Never raises for a bad record: the watchdog calls this on a trip, when it must not
    crash, and one broken file must not hide the other trainers.
    """
    directory = registry or registry_dir()
    scan = RegistryScan(trainers=[])
    if not directory.is_dir():
        return scan
    for path in sorted(directory.glob("*.json")):
        key = _fingerprint(path)
        try:
            entry = Registration.from_json(path.read_text())
        except (OSError, ValueError, KeyError, TypeError) as err:
            scan.ignored.append(
                IgnoredRecord(path, None, IgnoreReason.UNREADABLE, str(err), False, key)
            )
            continue
        mismatch = identity_mismatch(entry, directory, proc)
        if mismatch is None:
            scan.trainers.append(entry)
        else:
            scan.ignored.append(_ignore(path, entry.pid, mismatch, key))
    return scan


def confirm(
    entry: Registration, registry: Path | None = None, proc: Path = PROC
) -> IgnoredRecord | None:
    """Check ``entry`` again right before signalling it; ``None`` means it is the trainer.

    A record found stale here is removed, as in :func:`scan_registry`.
    """
    directory = registry or registry_dir()
    mismatch = identity_mismatch(entry, directory, proc)
    if mismatch is None:
        return None
    path = directory / f"{entry.pid}.json"
    return _ignore(path, entry.pid, mismatch, _fingerprint(path))


def identity_mismatch(entry: Registration, registry: Path, proc: Path = PROC) -> Mismatch | None:
    """Whether ``entry`` still names the process that wrote it (``None``) or why not.

    The start time in ``/proc/PID/stat`` is authoritative when it is visible; where
    ``/proc`` hides the process (``ProtectProc=invisible``) but the pid is alive, the
    trainer's lock on its registration file decides instead.
    """
    if entry.start_ticks is None:
        return Mismatch(IgnoreReason.NO_IDENTITY, "record has no start_ticks (old format)")
    here = boot_id(proc)
    if entry.boot_id is not None and here is not None and entry.boot_id != here:
        return Mismatch(IgnoreReason.OTHER_BOOT, f"boot_id {entry.boot_id} != {here}")
    ticks = start_ticks(entry.pid, proc)
    if ticks is not None:
        if ticks != entry.start_ticks:
            detail = f"start_ticks {ticks} != recorded {entry.start_ticks}"
            return Mismatch(IgnoreReason.PID_REUSED, detail)
        return None
    if not _alive(entry.pid):
        return Mismatch(IgnoreReason.DEAD_PID, "no such process")
    return _lock_verdict(registry / f"{entry.pid}.json")


def start_ticks(pid: int, proc: Path = PROC) -> int | None:
    """The process's start time in clock ticks since boot, or ``None`` if not visible."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    return parse_start_ticks(text)


def parse_start_ticks(stat: str) -> int | None:
    """Field 22 of a ``/proc/PID/stat`` line.

    Field 2 (comm) is in parentheses and may itself contain spaces and ``)``, so the
    line is split at its last ``)``; the fields after it are 3, 4, ...
    """
    _, paren, rest = stat.rpartition(")")
    fields = rest.split()
    index = _START_TIME_FIELD - 3
    if not paren or len(fields) <= index:
        return None
    try:
        return int(fields[index])
    except ValueError:
        return None


def boot_id(proc: Path = PROC) -> str | None:
    """The kernel's boot id, or ``None`` where ``/proc/sys`` is hidden (``ProcSubset=pid``)."""
    try:
        return (proc / "sys" / "kernel" / "random" / "boot_id").read_text().strip() or None
    except OSError:
        return None


def stack_dump_path(run_dir: Path, rank: int, pid: int) -> Path:
    """Where the trainer of ``rank`` (process ``pid``) writes its stacks on STACKS_SIGNAL."""
    return run_dir / STACKS_DIR_NAME / f"rank{rank}-pid{pid}.txt"


def append_emergency_record(run_dir: Path, record: EmergencyRecord) -> None:
    """Append one record and fsync, so the watchdog never reads a half line as committed."""
    path = run_dir / EMERGENCY_LOG_NAME
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(record.to_json() + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_emergency_records(run_dir: Path) -> list[EmergencyRecord]:
    """Records in order; a trailing partial line (a crash mid-write) is ignored."""
    path = run_dir / EMERGENCY_LOG_NAME
    if not path.exists():
        return []
    records: list[EmergencyRecord] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(EmergencyRecord.from_json(line))
        except (ValueError, KeyError):
            continue
    return records


def _lock_verdict(path: Path) -> Mismatch | None:
    """For a live pid that ``/proc`` hides: its trainer holds the file's flock, or it is gone.

    A shared non-blocking lock that succeeds means nobody holds the exclusive one, so
    the trainer that wrote the record is dead and the live pid belongs to someone else.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return Mismatch(IgnoreReason.DEAD_PID, "registration withdrawn")
    except OSError as err:
        return Mismatch(IgnoreReason.UNREADABLE, f"cannot open to test its lock: {err}")
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return None
    except OSError as err:
        return Mismatch(IgnoreReason.UNREADABLE, f"cannot test its lock: {err}")
    finally:
        os.close(fd)
    return Mismatch(IgnoreReason.PID_REUSED, "pid alive, hidden in /proc, record not locked")


def _ignore(path: Path, pid: int, mismatch: Mismatch, key: tuple[str, int, int]) -> IgnoredRecord:
    removed = mismatch.reason.stale and _discard(path)
    return IgnoredRecord(path, pid, mismatch.reason, mismatch.detail, removed, key)


def _discard(path: Path) -> bool:
    """Remove a stale record; failing (a read-only registry, permissions) is not an error."""
    try:
        path.unlink(missing_ok=True)
        path.with_suffix(PROGRESS_SUFFIX).unlink(missing_ok=True)
    except OSError as err:
        log.debug("cannot remove stale registration %s: %s", path, err)
        return False
    return True


def _fingerprint(path: Path) -> tuple[str, int, int]:
    try:
        st = path.stat()
    except OSError:
        return (path.name, 0, 0)
    return (path.name, st.st_ino, st.st_mtime_ns)


def _alive(pid: int) -> bool:
    """Whether the pid exists (works where ``/proc`` hides it; EPERM still means alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
