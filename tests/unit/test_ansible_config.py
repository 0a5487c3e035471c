"""The run's Ansible config: the project's defaults with the user's own settings over them,
read back through Ansible's own config manager (the way ansible-playbook will read it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nodeprep import ansible_config, paths


def effective(config: Path, *names: str) -> dict[str, str]:
    """NAME -> value as `ansible-config dump` reports it for CONFIG (only changed settings)."""
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-config")), "dump", "--only-changed",
         "--type", "all", "-c", str(config)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    found = {}
    for line in done.stdout.splitlines():
        name, _, rest = line.partition("(")
        if name.strip() in names:
            found[name.strip()] = rest.split(")", 1)[1].lstrip(" =").strip()
    return found


def test_the_users_settings_win_and_the_projects_fill_the_rest(tmp_path: Path) -> None:
    home = tmp_path / "ops"
    (home / "keys").mkdir(parents=True)
    (home / "keys" / "fleet.pem").write_text("not a real key\n")
    user = home / "ansible.cfg"
    user.write_text(
        "[defaults]\nremote_user = trainer ; the fleet's login\n"
        "private_key_file = keys/fleet.pem\nforks = 50\n"
        "[ssh_connection]\nssh_args = -o ControlMaster=no\n"
    )
    layered = ansible_config.layered(user, tmp_path / "run.cfg")
    seen = effective(layered, "DEFAULT_REMOTE_USER", "DEFAULT_PRIVATE_KEY_FILE",
                     "DEFAULT_FORKS", "DEFAULT_GATHERING", "DEFAULT_TIMEOUT")  # fmt: skip
    assert seen == {
        "DEFAULT_REMOTE_USER": "trainer",
        # Relative to the user's file, as Ansible resolves it there.
        "DEFAULT_PRIVATE_KEY_FILE": str(home / "keys" / "fleet.pem"),
        "DEFAULT_FORKS": "50",
        "DEFAULT_GATHERING": "explicit",  # the project's, which the user left alone
        "DEFAULT_TIMEOUT": "30",
    }
    text = layered.read_text()
    assert "ssh_args = -o ControlMaster=no" in text
    assert "pipelining = true" in text


def test_without_a_user_config_the_projects_is_used_as_it_is(tmp_path: Path) -> None:
    layered = ansible_config.layered(None, tmp_path / "run.cfg")
    seen = effective(layered, "DEFAULT_GATHERING", "DEFAULT_FORKS", "DEFAULT_REMOTE_USER")
    assert seen == {"DEFAULT_GATHERING": "explicit", "DEFAULT_FORKS": "20"}
    mine = ansible_config.layered(paths.ansible_cfg(), tmp_path / "same.cfg")
    assert mine.read_text() == layered.read_text()


def test_the_users_file_is_the_one_ansible_would_pick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd, home = tmp_path / "project", tmp_path / "home"
    cwd.mkdir(mode=0o755)
    home.mkdir()
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    (home / ".ansible.cfg").write_text("[defaults]\nforks = 7\n")
    assert ansible_config.user_config() == home / ".ansible.cfg"
    (cwd / "ansible.cfg").write_text("[defaults]\nforks = 8\n")
    assert ansible_config.user_config() == cwd / "ansible.cfg"
    monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path / "elsewhere.cfg"))
    (tmp_path / "elsewhere.cfg").write_text("[defaults]\nforks = 9\n")
    assert ansible_config.user_config() == tmp_path / "elsewhere.cfg"


def test_a_config_ansible_cannot_parse_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "ansible.cfg"
    broken.write_text("remote_user = nobody\n")  # a key before any [section]
    with pytest.raises(
        ansible_config.ConfigError, match=f"Cannot read the Ansible config {broken}"
    ):
        ansible_config.layered(broken, tmp_path / "run.cfg")
