"""Which rank writes a node's checkpoints and the trainer's lines: each node's local rank 0
with a copy per node (so every node's own log shows the job's steps), rank 0 alone with one
shared copy (one log that every node appends to would get each line once per node)."""

from __future__ import annotations

import pytest

from nodeprep.checkpoint import distributed


@pytest.mark.parametrize(
    ("rank", "local", "copies", "speaks"),
    [
        (0, "0", "node", True),
        (1, "0", "node", True),  # the second node's first rank
        (1, "1", "node", False),
        (0, "0", "shared", True),
        (1, "0", "shared", False),  # the second node's first rank: the shared log has rank 0's
        (1, "1", "shared", False),
    ],
)
def test_the_rank_that_writes_a_copy_is_the_one_that_speaks(
    monkeypatch: pytest.MonkeyPatch, rank: int, local: str, copies: str, speaks: bool
) -> None:
    monkeypatch.setattr(distributed, "active", lambda: True)
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: rank)
    monkeypatch.setenv("LOCAL_RANK", local)
    assert distributed.speaks_for_node(copies) is speaks


def test_without_a_process_group_the_one_process_speaks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distributed, "active", lambda: False)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert distributed.speaks_for_node("node") is True
    assert distributed.speaks_for_node("shared") is True
