"""The root helper trusts nothing from the daemon's request but the volume's index: a link,
a FIFO, a bad id or an oversized file is ignored (and removed), the echoed fields are
bounded; an unsafe answers' directory is refused; and an error of any kind still gives the
daemon an answer. Real files in tmp_path."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from nodeprep.heartbeat import grow_helper
from nodeprep.heartbeat.config import GrowConfig, GrowVolume

GOOD_ID = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def grow(tmp_path: Path) -> GrowConfig:
    (tmp_path / "req").mkdir()
    (tmp_path / "state").mkdir(mode=0o755)
    os.chmod(tmp_path / "state", 0o755)
    volume = GrowVolume(path=str(tmp_path), volume_id="vol-0123456789abcdef0", step_gb=1,
                        max_gb=2, region="eu-west-1")  # fmt: skip
    return GrowConfig(volumes=(volume,), request_dir=str(tmp_path / "req"),
                      state_dir=str(tmp_path / "state"))  # fmt: skip


def request_file(grow: GrowConfig) -> Path:
    return Path(grow.request_dir) / "volume-0.request"


def test_a_well_formed_request_is_taken_and_its_echoed_fields_bounded(grow: GrowConfig) -> None:
    request_file(grow).write_text(json.dumps(
        {"id": GOOD_ID, "volume": 0, "reason": "x" * 1000, "requested_at": 12.5, "more": [1]}
    ))  # fmt: skip
    taken = grow_helper.take_request(request_file(grow), 0)
    assert taken == {"id": GOOD_ID, "reason": "x" * 300, "requested_at": 12.5}
    assert not request_file(grow).exists()


@pytest.mark.parametrize(
    "make",
    [
        lambda p, _t: p.write_text(json.dumps({"id": "../../etc", "volume": 0})),
        lambda p, _t: p.write_text(json.dumps({"id": GOOD_ID, "volume": 1})),
        lambda p, _t: p.write_text(json.dumps({"id": GOOD_ID, "volume": 0, "pad": "y" * 5000})),
        lambda p, _t: p.write_text("not json"),
        lambda p, t: (
            (t / "secret").write_text(json.dumps({"id": GOOD_ID, "volume": 0}))
            or p.symlink_to(t / "secret")
        ),
        lambda p, _t: os.mkfifo(p),
    ],
    ids=["bad-id", "other-volume", "oversized", "not-json", "symlink", "fifo"],
)
def test_anything_else_is_ignored_and_removed(grow: GrowConfig, tmp_path: Path, make: Any) -> None:
    make(request_file(grow), tmp_path)
    assert grow_helper.take_request(request_file(grow), 0) is None
    assert not os.path.lexists(request_file(grow))


def test_an_answers_directory_others_may_write_is_refused(grow: GrowConfig) -> None:
    assert grow_helper.check_state_dir(grow) is None
    os.chmod(grow.state_dir, 0o777)
    assert "writable by no one else" in str(grow_helper.check_state_dir(grow))


def test_any_error_while_growing_still_answers(
    grow: GrowConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(volume: GrowVolume) -> dict[str, Any]:
        raise KeyError("Block count")

    monkeypatch.setattr(grow_helper, "grow_volume", broken)
    request = {"id": GOOD_ID, "reason": "full soon", "requested_at": None}
    document = grow_helper.answer(grow, 0, request)
    assert (document["outcome"], document["message"]) == ("failed", "KeyError: 'Block count'")
    written = json.loads((Path(grow.state_dir) / "volume-0.json").read_text())
    assert written["request_id"] == GOOD_ID
    log = (Path(grow.state_dir) / "growth.log").read_text().splitlines()
    assert json.loads(log[-1])["outcome"] == "failed"
