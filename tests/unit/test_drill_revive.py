"""The preempt drill's revive: the shell that starts a job again after the drill's SIGTERM
(and that its undo timer runs when the drill is lost). Run here with a stand-in `tmux`,
`systemctl` and `systemd-run` first on PATH that record their calls (no session, no unit
is touched): a dead or missing session is started again in a transient unit that keeps it,
a live one and a stopped job are left alone."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from collection_plugins import load

training_job = load("training_job")

RECORDER = '#!/bin/sh\necho "$(basename "$0") $*" >> "$CALLS"\n'
TMUX = RECORDER + (
    'case "$1" in list-panes) [ -n "$PANE" ] || exit 1; echo "$PANE" ;; esac\nexit 0\n'
)


def _revive(tmp_path: Path, pane: str, stopped: bool = False) -> list[str]:
    bin_dir, run_dir = tmp_path / "bin", tmp_path / "run"
    bin_dir.mkdir(exist_ok=True)
    run_dir.mkdir(exist_ok=True)
    for name, text in (("tmux", TMUX), ("systemctl", RECORDER), ("systemd-run", RECORDER)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (run_dir / "exit.json").write_text('{"exit_code": 143}\n')
    if stopped:
        (run_dir / "stop.json").write_text("{}\n")
    name = f"revive-test-{os.getpid()}"  # no unit of this name in /etc/systemd/system
    node = SimpleNamespace(
        p={"tmux": "tmux"}, name=name, run_dir=str(run_dir),
        account=pwd.getpwuid(os.getuid()), path=lambda f: str(run_dir / f),
        as_user=lambda argv: argv,
    )  # fmt: skip
    calls = tmp_path / "calls"
    calls.write_text("")
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(calls), "PANE": pane}
    done = subprocess.run(["/bin/sh", "-c", training_job.revive_script(node)], env=env,
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return calls.read_text().splitlines()


@pytest.mark.parametrize("pane", ["1", ""])  # dead (remain-on-exit), or gone
def test_a_dead_or_missing_session_is_started_again_in_a_unit_that_keeps_it(
    tmp_path: Path, pane: str
) -> None:
    calls = _revive(tmp_path, pane)
    assert calls[0].startswith("tmux list-panes -t =revive-test-"), calls
    assert calls[0].endswith(": -F #{pane_dead}"), calls
    assert calls[1].startswith("tmux kill-session -t =revive-test-"), calls
    (started,) = [c for c in calls if c.startswith("systemd-run ")]
    for part in (f"--uid={pwd.getpwuid(os.getuid()).pw_name}", "--property=KillMode=process",
                 "--property=RemainAfterExit=yes", f"--working-directory={tmp_path / 'run'}",
                 "tmux new-session -d -s revive-test-", f"{tmp_path / 'run' / 'launch.sh'}",
                 "remain-on-exit failed"):  # fmt: skip
        assert part in started, started
    assert not (tmp_path / "run" / "exit.json").exists()  # the last run's exit is not this one's


def test_a_live_session_and_a_stopped_job_are_left_alone(tmp_path: Path) -> None:
    calls = _revive(tmp_path, "0")
    assert len(calls) == 1, calls  # looked, nothing else
    assert calls[0].startswith("tmux list-panes"), calls
    assert (tmp_path / "run" / "exit.json").exists()
    assert _revive(tmp_path, "1", stopped=True) == []  # `nodeprep stop` said stop: not even a look
