"""When the daemon asks for growth, and what it does with the helper's answers: one request
outstanding at a time, a growth clears the hold, a cooldown holds until EC2 accepts again, a
failure until retry_s has passed, the maximum for good, a helper that never answers is
reported; each refusal warns the trainers once. Real files in tmp_path; the clock is the
test's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodeprep.heartbeat import grow
from nodeprep.heartbeat.actions import Trip
from nodeprep.heartbeat.config import GrowConfig, GrowVolume
from nodeprep.heartbeat.free_space import DiskReading
from nodeprep.job import read_json

GIB = 2**30


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(tmp_path: Path) -> tuple[grow.GrowAction, Clock, list[Trip], Path]:
    (tmp_path / "req").mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "data").mkdir()
    cfg = GrowConfig(
        volumes=(GrowVolume(path=str(tmp_path / "data"), volume_id="vol-0123456789abcdef0",
                            step_gb=1, max_gb=3, when_s=600),),
        request_dir=str(tmp_path / "req"), state_dir=str(tmp_path / "state"),
        answer_timeout_s=300, retry_s=120,
    )  # fmt: skip
    trips: list[Trip] = []
    clock = Clock()
    return grow.GrowAction(cfg, trips.append, clock=clock), clock, trips, tmp_path


def reading(path: Path, until: float | None, level: str = "ok") -> DiskReading:
    return DiskReading(str(path / "data"), GIB, GIB // 2, 1e6 if until else None, until, level)


def request(tmp_path: Path) -> dict[str, Any] | None:
    return read_json(str(tmp_path / "req" / "volume-0.request"))


def answer(tmp_path: Path, **document: Any) -> None:
    """What the helper does: take the request, write its answer."""
    taken = request(tmp_path)
    assert taken is not None
    (tmp_path / "req" / "volume-0.request").unlink()
    document["request_id"] = taken["id"]
    (tmp_path / "state" / "volume-0.json").write_text(json.dumps(document))


def test_a_request_only_when_full_soon_or_critical_and_one_at_a_time(world: Any) -> None:
    action, clock, trips, tmp = world
    action.observe("disk", reading(tmp, None))
    action.observe("disk", reading(tmp, 3600))
    assert request(tmp) is None  # not filling, or full later than when_s
    action.observe("disk", reading(tmp, 300))
    first = request(tmp)
    assert first is not None
    assert first["volume"] == 0
    assert "full in 300 s (under 600 s)" in first["reason"]
    action.observe("disk", reading(tmp, 200))
    assert request(tmp) == first  # still outstanding: not asked twice
    answer(tmp, outcome="grown", message="grew", size_gb=2, finished_at=clock.now)
    action.observe("disk", reading(tmp, None, "critical"))
    again = request(tmp)
    assert again is not None
    assert again["id"] != first["id"]
    assert "is critical" in again["reason"]
    assert action.volumes[0].grown_total == 1
    # Critical: an emergency checkpoint is asked for before the growth.
    assert [t.evidence for t in trips] == [
        f"{tmp / 'data'} is critical; checkpoint before growing it"
    ]


def test_a_cooldown_holds_until_ec2_accepts_again_and_is_said_once(world: Any) -> None:
    action, clock, trips, tmp = world
    action.observe("disk", reading(tmp, 60))
    answer(tmp, outcome="refused", kind="cooldown", message="retry after T",
           next_possible_at=clock.now + 3600)  # fmt: skip
    action.observe("disk", reading(tmp, 60))
    assert request(tmp) is None
    clock.now += 3599
    action.observe("disk", reading(tmp, 60))
    assert request(tmp) is None
    clock.now += 2
    action.observe("disk", reading(tmp, 60))
    answer(tmp, outcome="refused", kind="cooldown", message="retry after T",
           next_possible_at=clock.now + 3600)  # fmt: skip
    action.observe("disk", reading(tmp, 60))
    assert [t.evidence for t in trips] == [f"cannot grow {tmp / 'data'}: retry after T"]
    assert trips[0].probe == "disk:grow"
    assert action.volumes[0].refused_total == 2


def test_a_failure_is_retried_after_retry_s_and_the_maximum_never(world: Any) -> None:
    action, clock, trips, tmp = world
    action.observe("disk", reading(tmp, 60))
    answer(tmp, outcome="failed", kind="", message="growpart failed")
    action.observe("disk", reading(tmp, 60))
    clock.now += 119
    action.observe("disk", reading(tmp, 60))
    assert request(tmp) is None
    clock.now += 2
    action.observe("disk", reading(tmp, 60))
    answer(tmp, outcome="refused", kind="maximum", message="at max_gb 3")
    action.observe("disk", reading(tmp, 60))
    clock.now += 10**9
    action.observe("disk", reading(tmp, 1, "critical"))
    assert request(tmp) is None
    assert [t.evidence.rsplit(": ", 1)[1] for t in trips] == ["growpart failed", "at max_gb 3"]


def test_a_helper_that_never_answers_is_reported(world: Any) -> None:
    action, clock, trips, tmp = world
    action.observe("disk", reading(tmp, 60))
    clock.now += 301
    action.observe("disk", reading(tmp, 60))
    assert len(trips) == 1
    assert "no answer from the growth helper within 300 s" in trips[0].evidence
    assert "nodeprep-volume-grow.path" in trips[0].evidence


def test_a_path_on_another_filesystem_is_not_this_volumes(world: Any, tmp_path: Path) -> None:
    action, _clock, _trips, tmp = world
    assert action.volume_for("/proc") is None
    assert action.volume_for(str(tmp / "data")) is action.volumes[0]
