"""The tmux verify checks' decisions (tmux_status); tests/integration/tmux runs the probes."""

from __future__ import annotations

from typing import Any

from collection_plugins import load

status = load("tmux_status")
EXPECT: dict[str, Any] = {
    "binary": "/usr/local/bin/tmux",
    "version": "",
    "min_version": "3.2",
    "settings": {"remain-on-exit": "on", "history-limit": 100000},
    "config_path": "/etc/tmux.conf",
    "users": ["nodeprep"],
}
SETTINGS = (0, "remain-on-exit on\nhistory-limit 100000\n", "")
LOGIND = (0, 'b true\nas 2 "root" "nodeprep"\n', "")


def verdicts(expect: dict[str, Any] = EXPECT, **probes: Any) -> Any:
    found = status.judge(
        expect,
        probes.get("version", (0, "tmux 3.5a\n", "")),
        probes.get("settings", SETTINGS),
        probes.get("linger", {"nodeprep": (0, "yes\n", "")}),
        probes.get("logind", LOGIND),
    )
    return {c["check"]: c for c in found}


def test_loose_versions_order_like_tmux_releases() -> None:
    assert status.loose_version("3.5a") > status.loose_version("3.5")
    assert status.loose_version("3.10") > status.loose_version("3.9")
    assert status.loose_version("next-3.6") > status.loose_version("3.5a")


def test_a_hardened_node_passes_and_a_too_old_tmux_fails() -> None:
    assert all(c["passed"] for c in verdicts().values())
    old = verdicts(version=(0, "tmux 3.1c\n", ""))["tmux.version"]
    assert not old["passed"]
    assert old["detail"].startswith('/usr/local/bin/tmux -V printed "tmux 3.1c", expected tmux 3.2')
    pinned = verdicts({**EXPECT, "version": "3.5a"}, version=(0, "tmux 3.4\n", ""))
    assert not pinned["tmux.version"]["passed"]
    missing = verdicts(version=(127, "", "No such file or directory"))["tmux.version"]
    assert not missing["passed"]
    assert 'printed "No such file or directory"' in missing["detail"]


def test_settings_are_compared_as_tmux_prints_them() -> None:
    assert status.settings_seen('default-shell "/bin/bash"\nmouse on\n') == {
        "default-shell": "/bin/bash",
        "mouse": "on",
    }
    off = verdicts(settings=(0, "remain-on-exit off\nhistory-limit 2000\n", ""))["tmux.config"]
    assert not off["passed"]
    assert '"remain-on-exit": "off"' in off["detail"]
    assert "fix /etc/tmux.conf" in off["detail"]


def test_linger_and_logout_survival_need_every_user() -> None:
    found = verdicts(linger={"nodeprep": (0, "no\n", "")}, logind=(0, 'b true\nas 1 "root"\n', ""))
    assert not found["tmux.linger"]["passed"]
    assert "Linger as nodeprep=no" in found["tmux.linger"]["detail"]
    assert not found["tmux.logout_survival"]["passed"]
    assert verdicts(logind=(0, "b false\nas 0\n", ""))["tmux.logout_survival"]["passed"]
    none = verdicts({**EXPECT, "users": []})
    assert none["tmux.linger"]["skip"] == "no tmux_users were configured"
