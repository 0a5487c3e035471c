"""Batch planning and the rollout summary, without running Ansible."""

from __future__ import annotations

import pytest

from nodeprep import rollout
from nodeprep.runner import PlayBatch, RunResult, TaskFailure

HOSTS = [f"n{i:02d}" for i in range(1, 21)]


def test_plan_matches_ansible_serial_rules() -> None:
    # 1, then 10 % of 20 = 2, then 100 % = 20 (all that is left); the last size repeats.
    assert [len(b) for b in rollout.plan_batches(HOSTS, [1, "10%", "100%"])] == [1, 2, 17]
    assert [len(b) for b in rollout.plan_batches(HOSTS, [3])] == [3] * 6 + [2]
    # A percentage below one host still makes batches of one.
    assert rollout.plan_batches(["a", "b", "c"], [1, "10%", "100%"]) == [["a"], ["b"], ["c"]]
    assert rollout.plan_batches(["a", "b"], ["100%"]) == [["a", "b"]]


def test_canary_leads_and_must_be_selected() -> None:
    assert rollout.order_hosts(["a", "b", "c"], "c") == ["c", "a", "b"]
    assert rollout.order_hosts(["a", "b"], None) == ["a", "b"]
    with pytest.raises(rollout.RolloutInputError, match="--canary 'z' is not one of"):
        rollout.order_hosts(["a", "b"], "z")


@pytest.mark.parametrize("text", ["0", "1,abc", "150%", "", "1,,2", "-1"])
def test_bad_batches_are_refused(text: str) -> None:
    with pytest.raises(rollout.RolloutInputError, match="write it like --batches 1,10%,100%"):
        rollout.parse_serial(text)


def test_parse_serial_keeps_counts_and_percentages() -> None:
    assert rollout.parse_serial("1, 25%,100%") == [1, "25%", "100%"]


def _result(plays: list[PlayBatch], failures: list[TaskFailure]) -> RunResult:
    return RunResult(
        "failed" if failures else "successful", 2 if failures else 0, {}, failures, plays=plays
    )


def test_stopped_rollout_names_the_canary_failure_and_untouched_nodes() -> None:
    planned = rollout.plan_batches(["c", "a", "b"], [1, "100%"])
    failure = TaskFailure("c", "Grow the disk", "volume_grow", "disk is gone")
    plays = [
        PlayBatch("Harden every node", ["a", "b", "c"]),
        PlayBatch(rollout.rolling_play(), ["c"]),
    ]
    ran = rollout.read_rollout(_result(plays, [failure]), planned)
    assert ran is not None
    assert ran.stopped
    assert ran.untouched == ["a", "b"]
    lines = rollout.describe(ran)
    assert lines[0] == "rollout batch 1/2: c"
    assert "rollout stopped at the canary (c): c failed 'Grow the disk': disk is gone" in lines
    assert lines[-1] == "never touched by the disruptive roles: a, b"


def test_complete_rollout_lists_every_batch() -> None:
    planned = [["a"], ["b", "c"]]
    plays = [
        PlayBatch(rollout.rolling_play(), ["a"]),
        PlayBatch(rollout.rolling_play(), ["b", "c"]),
    ]
    ran = rollout.read_rollout(_result(plays, []), planned)
    assert ran is not None
    assert not ran.stopped
    assert ran.untouched == []
    assert rollout.describe(ran) == ["rollout batch 1/2: a", "rollout batch 2/2: b, c"]


def test_no_rolling_play_means_no_rollout() -> None:
    assert (
        rollout.read_rollout(_result([PlayBatch("Harden every node", ["a"])], []), [["a"]]) is None
    )
