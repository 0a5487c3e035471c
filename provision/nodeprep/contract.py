"""The trainer <-> heartbeat contract: where a trainer registers, and what it records.

Both sides import this module and neither imports the other, so the node-side
watchdog never needs torch and the trainer never needs the watchdog.

- A running trainer writes ``<registry>/<pid>.json`` (a :class:`Registration`)
  when it starts and removes it when it exits. The registry defaults to
  ``/run/nodeprep/trainers`` and is overridden by ``NODEPREP_RUN_DIR``.
- The watchdog sends ``EMERGENCY_SIGNAL`` (SIGUSR1) to that pid to ask for an
  emergency checkpoint. The trainer only sets a flag in the handler and saves
  at the next step boundary.
- After the save commits, the trainer appends one JSON line (an
  :class:`EmergencyRecord`) to ``<run_dir>/emergency.jsonl``, which lets the
  watchdog report detection -> durable-checkpoint latency.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

EMERGENCY_SIGNAL = signal.SIGUSR1
DEFAULT_REGISTRY = Path("/run/nodeprep/trainers")
EMERGENCY_LOG_NAME = "emergency.jsonl"


def registry_dir() -> Path:
    """The directory trainers register in (``NODEPREP_RUN_DIR`` overrides the default)."""
    override = os.environ.get("NODEPREP_RUN_DIR")
    return Path(override) / "trainers" if override else DEFAULT_REGISTRY


@dataclass(frozen=True)
class Registration:
    """What a running trainer publishes about itself."""

    pid: int
    run_dir: str
    started_at: float

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Registration:
        data = json.loads(text)
        return cls(
            pid=int(data["pid"]), run_dir=str(data["run_dir"]), started_at=float(data["started_at"])
        )


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
    """Publish this process as a trainer; returns the registration file (atomic write)."""
    target_dir = registry or registry_dir()
    target_dir.mkdir(parents=True, exist_ok=True)
    entry = Registration(pid=os.getpid(), run_dir=str(run_dir), started_at=started_at)
    path = target_dir / f"{entry.pid}.json"
    fd, tmp = tempfile.mkstemp(dir=target_dir, prefix=".reg-")
    with os.fdopen(fd, "w") as handle:
        handle.write(entry.to_json())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def unregister(registry: Path | None = None) -> None:
    """Remove this process's registration, if present."""
    path = (registry or registry_dir()) / f"{os.getpid()}.json"
    path.unlink(missing_ok=True)


def registered_trainers(registry: Path | None = None) -> list[Registration]:
    """Every registration whose process is still alive; stale or unreadable files are skipped."""
    found: list[Registration] = []
    directory = registry or registry_dir()
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.json")):
        try:
            entry = Registration.from_json(path.read_text())
        except (OSError, ValueError, KeyError):
            continue
        if _alive(entry.pid):
            found.append(entry)
    return found


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
