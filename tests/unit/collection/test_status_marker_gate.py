"""Each role's status module reads the role's marker itself (one remote call per role in
verify): absent, every one of its checks skips saying the role was not applied; corrupt or
unreadable, every one fails naming the file and the command that rewrites it. Real
ansible-playbook on this machine, against marker directories the test makes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeprep import paths

pytestmark = pytest.mark.timeout(180)
PLAYBOOK = Path(__file__).with_name("status_gate.yml")
NAMES = {
    "preflight": ["python", "os", "disk", "time_sync"],
    "heartbeat": ["service", "watchdog", "metrics", "probes"],
    "tmux": ["version", "config", "linger", "logout_survival"],
    "nic_bond": ["mode", "miimon", "members_up", "active_member", "peer"],
    "volume_grow": ["size"],
    "apptainer": ["present", "image_hash", "runs"],
    "dataset": ["staged"],
}


def judge_all(marker_dir: Path, tmp_path: Path) -> dict[str, dict[str, dict[str, object]]]:
    out = tmp_path / f"{marker_dir.name}.json"
    collections = paths.link_collection(tmp_path / "collections")
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_NOCOLOR": "1"}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,",
         str(PLAYBOOK), "-e", json.dumps({"marker_dir": str(marker_dir), "out": str(out),
                                   "ansible_python_interpreter": sys.executable})],
        capture_output=True, text=True, env=env, timeout=150, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    returned = json.loads(out.read_text())
    return {role: {c["check"]: c for c in checks} for role, checks in returned.items()}


def test_absent_skips_and_corrupt_or_unreadable_fails_every_check(tmp_path: Path) -> None:
    absent, broken = tmp_path / "absent", tmp_path / "broken"
    absent.mkdir()
    broken.mkdir()
    for role in NAMES:
        (broken / f"{role}.json").write_text("{not json")
    # A marker that is a directory cannot be read, whoever runs the test (root included).
    (broken / "apptainer.json").unlink()
    (broken / "apptainer.json").mkdir()

    skipped, failed = judge_all(absent, tmp_path), judge_all(broken, tmp_path)
    # The smoke drill reads the apptainer marker for its image: absent, it runs on the node
    # (here a Python that does not exist: it skips saying so); unreadable, it fails.
    (drill,) = skipped.pop("smoke").values()
    assert drill["skip"].startswith(
        "the trainer cannot run on this node: /nonexistent/python3 cannot import torch"
    ), drill
    (drill,) = failed.pop("smoke").values()
    assert drill["passed"] is False, drill
    assert not drill["skip"], drill
    assert f"{broken / 'apptainer.json'} cannot be read" in drill["detail"], drill
    assert sorted(p.name for p in absent.iterdir()) == [], "the drill left its work directory"
    for role, names in NAMES.items():
        expected = {f"{role}.{name}" for name in names}
        assert set(skipped[role]) == expected, skipped[role]
        assert set(failed[role]) == expected, failed[role]
        for check in skipped[role].values():
            assert check["skip"] == f"role {role} not applied on this node", check
        for check in failed[role].values():
            assert not check["skip"], check
            assert check["passed"] is False, check
            detail = str(check["detail"])
            assert str(broken / f"{role}.json") in detail, check
            assert f"nodeprep provision --tags {role}" in detail, check
            kind = "cannot be read" if role == "apptainer" else "is not valid JSON"
            assert kind in detail, check
