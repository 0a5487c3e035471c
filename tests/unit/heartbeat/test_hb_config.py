"""Config validation: good files load, bad ones fail with one line naming the key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeprep.heartbeat import config as config_mod


def _good(tmp_path: Path) -> dict[str, Any]:
    return {
        "metrics": {"path": str(tmp_path / "hb.prom"), "interval_s": 2},
        "actions": {
            "pause_trainers": True,
            "tmux": {"session": "train", "keys": ["C-c"]},
            "webhook": {"url": "http://127.0.0.1:9/hook", "timeout_s": 1},
        },
        "probes": [
            {
                "name": "gw",
                "type": "tcp",
                "host": "127.0.0.1",
                "port": 22,
                "interval": 1,
                "timeout": 0.5,
            },
            {"name": "meta", "type": "imds", "url": "http://127.0.0.1:1"},
            {"name": "spot", "type": "spot_notice"},
            {
                "name": "web",
                "type": "http",
                "url": "http://127.0.0.1:2/",
                "expect_status": [200, 204],
            },
            {"name": "ckpt", "type": "writable", "path": str(tmp_path)},
            {"name": "gpu", "type": "gpu", "max_temp_c": 80},
            {"name": "peer", "type": "icmp", "host": "10.77.0.2"},
        ],
    }


def test_good_config_loads_with_defaults(tmp_path: Path) -> None:
    cfg = config_mod.parse(_good(tmp_path))
    kinds = ["tcp", "imds", "spot_notice", "http", "writable", "gpu", "icmp"]
    assert [p.type for p in cfg.probes] == kinds
    assert cfg.probes[6].host == "10.77.0.2"
    assert cfg.probes[0].fail_threshold == 3
    assert cfg.probes[0].recover_threshold == 2
    # A network probe is hedged and retried after a third of its timeout; others wait out
    # their interval.
    assert cfg.probes[0].retry_interval == pytest.approx(0.5 / 3)
    assert cfg.probes[2].retry_interval == pytest.approx(2.0 / 3)
    assert cfg.probes[4].retry_interval == cfg.probes[4].interval  # writable
    assert cfg.probes[2].url == config_mod.DEFAULT_METADATA_URL
    assert cfg.probes[3].expect_status == (200, 204)
    assert cfg.actions.tmux_session == "train"
    assert cfg.actions.pause_trainers is True


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c["probes"][0].update(type="ping"), "probes[0].type: unknown probe type 'ping'"),
        (lambda c: c["probes"][6].pop("host"), "probes[6].host: an icmp probe needs a host"),
        (lambda c: c["probes"][0].update(interval=-1), "probes[0].interval: must be a positive"),
        (lambda c: c["probes"][0].update(timeout=5), "probes[0].timeout: 5 s exceeds the interval"),
        (
            lambda c: c["probes"][0].update(retry_interval=60),
            "probes[0].retry_interval: 60 s exceeds the interval",
        ),
        (
            lambda c: c["probes"][0].update(retry_interval=0),
            "probes[0].retry_interval: must be a positive number",
        ),
        (
            lambda c: c["probes"][4].update(path="/nonexistent/ckpt"),
            "probes[4].path: /nonexistent/ckpt is not a directory",
        ),
        (lambda c: c["probes"][0].update(port=70000), "probes[0].port: must be a TCP port"),
        (lambda c: c["probes"][0].update(fail_threshold=0), "probes[0].fail_threshold: must be"),
        (lambda c: c["probes"][0].update(intervall=2), "probes[0].intervall: unknown key"),
        (lambda c: c["probes"][1].update(name="gw"), "probes[1].name: 'gw' is used twice"),
        (lambda c: c["metrics"].update(path="/nonexistent/dir/x.prom"), "metrics.path: directory"),
        (lambda c: c["actions"]["tmux"].update(keys=[]), "actions.tmux.keys: must be a list"),
        (lambda c: c["actions"].update(signal_trainers="yes"), "actions.signal_trainers: expected"),
        (lambda c: c.update(probes=[]), "probes: list at least one probe"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, mutate: Any, message: str) -> None:
    raw = _good(tmp_path)
    mutate(raw)
    with pytest.raises(config_mod.ConfigError) as caught:
        config_mod.parse(raw)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def _check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeprep.heartbeat", "--check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_check_config_cli_accepts_good_and_refuses_bad(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_good(tmp_path)))
    ok = _check(good)
    assert ok.returncode == 0, ok.stderr
    assert "is valid (7 probe(s))" in ok.stdout
    raw = _good(tmp_path)
    raw["probes"][1]["type"] = "ping"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    refused = _check(bad)
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "probes[1].type: unknown probe type 'ping'" in lines[0]
    notjson = tmp_path / "broken.json"
    notjson.write_text("{probes: ")
    assert "not valid JSON at line 1" in _check(notjson).stderr


def test_daemon_refuses_to_start_on_bad_config(tmp_path: Path) -> None:
    raw = _good(tmp_path)
    raw["probes"][0]["interval"] = -3
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    run = subprocess.run(
        [sys.executable, "-m", "nodeprep.heartbeat", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"nodeprep-heartbeat: bad config {bad}: probes[0].interval: must be a positive number, "
        "got -3."
    ]
