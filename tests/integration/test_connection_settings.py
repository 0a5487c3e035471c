"""What ssh is told, from the user's own ansible.cfg and ansible-playbook's options.

`nodeprep verify` runs for real against one inventory host on 127.0.0.1; a recording
stand-in `ssh` first on PATH writes the arguments Ansible's ssh connection gives it and
exits 255 (the host is unreachable, exit 3), so nothing is reached and every setting that
decides the connection can be read from those arguments.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from proctree import descendants

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

STAND_IN = """#!/bin/sh
# Recording stand-in for ssh: one line per call, then "unreachable".
printf '%s\\n' "$*" >> "$NODEPREP_TEST_SSH_LOG"
exit 255
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text(STAND_IN)
    ssh.chmod(ssh.stat().st_mode | stat.S_IXUSR)
    project = tmp_path / "ops"
    (project / "keys").mkdir(parents=True)
    for key in ("fleet.pem", "other.pem"):
        (project / "keys" / key).write_text("not a real key\n")
    (project / "hosts.ini").write_text("node1 ansible_host=127.0.0.1 ansible_port=22\n")
    return project


def _env(workdir: Path, log: Path) -> dict[str, str]:
    """The user's environment but ANSIBLE_CONFIG, the stand-in ssh first on PATH, HOME apart."""
    env = {k: v for k, v in os.environ.items() if k != "ANSIBLE_CONFIG"}
    env.update(PATH=f"{workdir.parent / 'bin'}{os.pathsep}{env['PATH']}",
               HOME=str(workdir.parent), NODEPREP_TEST_SSH_LOG=str(log))  # fmt: skip
    return env


def verify(workdir: Path, *args: str) -> tuple[int, list[str], str]:
    """`nodeprep verify` from WORKDIR with the stand-in ssh: exit code, ssh calls, output."""
    log = workdir / "ssh.log"
    log.unlink(missing_ok=True)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("nodeprep")), "verify", "hosts.ini",
         "--checks", "preflight", *args],
        cwd=workdir, env=_env(workdir, log), capture_output=True, text=True, timeout=240,
        check=False,
    )  # fmt: skip
    calls = log.read_text().splitlines() if log.exists() else []
    return done.returncode, calls, done.stdout + done.stderr


def test_the_users_ansible_cfg_is_honoured_over_the_projects_defaults(workdir: Path) -> None:
    (workdir / "ansible.cfg").write_text(
        "[defaults]\nremote_user = trainer\nprivate_key_file = keys/fleet.pem\n"
    )
    code, calls, output = verify(workdir)
    assert code == 3, output
    assert calls, output
    call = calls[0]
    assert 'User="trainer"' in call, call
    assert f'IdentityFile="{workdir}/keys/fleet.pem"' in call, call
    # The project's ssh_args still apply: the user's file does not set them.
    assert "ControlPersist=120s" in call, call
    assert "ServerAliveInterval=15" in call, call


def test_the_command_line_wins_over_the_users_config(workdir: Path) -> None:
    (workdir / "ansible.cfg").write_text(
        "[defaults]\nremote_user = trainer\nprivate_key_file = keys/fleet.pem\n"
    )
    code, calls, output = verify(workdir, "-u", "ops", "--private-key", "keys/other.pem")
    assert code == 3, output
    call = calls[0]
    assert 'User="ops"' in call, call
    assert f'IdentityFile="{workdir}/keys/other.pem"' in call, call


def test_without_a_user_config_the_projects_defaults_apply(workdir: Path) -> None:
    code, calls, output = verify(workdir)
    assert code == 3, output
    call = calls[0]
    assert "User=" not in call, call
    assert "ControlPersist=120s" in call, call


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--private-key", "keys/missing.pem"), "Invalid value for '--private-key'"),
        (("--vault-password-file", "nope"), "Invalid value for '--vault-password-file'"),
        (("-u", " "), "--user is empty"),
        (
            ("--vault-password-file", "keys/other.pem", "-J"),
            "--vault-password-file and --ask-vault-pass exclude each other",
        ),
    ],
)
def test_bad_connection_options_are_refused_before_any_ssh(
    workdir: Path, args: tuple[str, ...], said: str
) -> None:
    code, calls, output = verify(workdir, *args)
    assert code == 2, output
    assert said in output, output
    assert "Traceback" not in output
    assert calls == []


def test_a_broken_user_config_is_refused_before_any_ssh(workdir: Path) -> None:
    (workdir / "ansible.cfg").write_text("remote_user = trainer\n")
    code, calls, output = verify(workdir)
    assert code == 2, output
    assert f"Cannot read the Ansible config {workdir / 'ansible.cfg'}" in output, output
    assert calls == []


def test_asked_passwords_answer_ansibles_prompts_and_go_nowhere_else(workdir: Path) -> None:
    """-K and -J: nodeprep asks once each; ansible-playbook's own prompts are answered for it
    (unanswered, it would wait for ever) and the secrets reach neither ssh nor the output."""
    log = workdir / "ssh.log"
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("nodeprep")), "verify", "hosts.ini",
         "--checks", "preflight", "-b", "-K", "-J"],
        cwd=workdir, env=_env(workdir, log), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        output, _ = proc.communicate("become-s3cret\nvault-s3cret\n", timeout=120)
    except subprocess.TimeoutExpired:
        # ansible-playbook runs on a pty of its own session: end the whole tree by PID.
        for pid in [*descendants(proc.pid), proc.pid]:
            os.kill(pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("ansible-playbook was left waiting at a password prompt")
    assert proc.returncode == 3, output
    assert "BECOME password" in output
    assert "Vault password" in output
    calls = log.read_text()
    assert "--become" not in calls
    for secret in ("become-s3cret", "vault-s3cret"):
        assert secret not in output
        assert secret not in calls
