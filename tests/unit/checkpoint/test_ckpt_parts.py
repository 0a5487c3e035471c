"""The commit of a sharded save: every rank writes its part, rank 0 commits one manifest.

Ranks are threads here (the protocol is files in one shared directory); the real 2-rank
FSDP2 job is tests/integration/checkpoint/test_sharded.py.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from nodeprep.checkpoint import (
    Checkpointer,
    CheckpointWriteError,
    ShardedCheckpointer,
    committed,
    verify,
)
from nodeprep.checkpoint.durable import Part, commit_part, part_directory

from .conftest import assert_same_state, make_run


def _part(rank: int, world: int = 2, timeout_s: float = 30.0) -> Part:
    return Part(rank=rank, world_size=world, token="t0k3n", timeout_s=timeout_s)


def _payloads(rank: int) -> dict[str, Any]:
    shard = {"w": torch.full((40_000,), float(rank))}  # large: a .bin per rank
    payloads: dict[str, Any] = {f"model.rank{rank:05d}.pt": {"state": shard, "layout": []}}
    if rank == 0:
        payloads["train.pt"] = {"step": 3}
    return payloads


def _in_thread(target: Any) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def test_rank_zero_commits_one_manifest_over_every_ranks_files(tmp_path: Path) -> None:
    part_directory(tmp_path, 3, "light", "t0k3n").mkdir()  # as rank 0 does before the save
    extra = {"world_size": 2, "sharded": True}
    other, errors = _in_thread(
        lambda: commit_part(tmp_path, 3, "light", _payloads(1), _part(1), extra)
    )
    path, nbytes = commit_part(tmp_path, 3, "light", _payloads(0), _part(0), extra)
    other.join()
    assert errors == []
    assert committed(tmp_path) == [path]
    manifest = verify(path)
    assert sorted(manifest.files) == [
        "model.rank00000.bin", "model.rank00000.pt", "model.rank00001.bin", "model.rank00001.pt",
        "train.pt",
    ]  # fmt: skip
    assert manifest.extra == extra
    assert nbytes == sum(manifest.files[n].size for n in manifest.files if "rank00000" in n) + (
        manifest.files["train.pt"].size
    )
    assert sorted(p.name for p in path.iterdir() if p.name.startswith("part-")) == []


def test_a_rank_whose_write_failed_fails_the_save_naming_it(tmp_path: Path) -> None:
    part_directory(tmp_path, 3, "full", "t0k3n").mkdir()
    bad = {"model.rank00001.txt": {}}  # refused before any byte is written
    with pytest.raises(CheckpointWriteError, match=r"failed on rank 1: payload names end in \.pt"):
        commit_part(tmp_path, 3, "full", bad, _part(1), {})
    with pytest.raises(CheckpointWriteError, match=r"on rank 1: payload names end in \.pt"):
        commit_part(tmp_path, 3, "full", _payloads(0), _part(0), {})
    assert list(tmp_path.iterdir()) == []  # no checkpoint, no temporary directory


def test_a_rank_late_after_rank_zero_gave_up_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(CheckpointWriteError, match=r"on rank 1: .* rank 0 gave this save up"):
        commit_part(tmp_path, 3, "full", _payloads(1), _part(1), {})
    assert list(tmp_path.iterdir()) == []


def test_a_rank_that_never_reports_fails_the_save_in_time(tmp_path: Path) -> None:
    with pytest.raises(
        CheckpointWriteError, match=r"rank\(s\) 1 did not write their part within 1 s"
    ):
        commit_part(tmp_path, 3, "full", _payloads(0), _part(0, timeout_s=1.0), {})
    assert list(tmp_path.iterdir()) == []


def test_sharded_checkpointer_without_a_process_group_round_trips(tmp_path: Path) -> None:
    """One process, no DTensor: the same files and guarantees, and a bit-exact resume."""
    run = make_run(width=3000)
    ckpt = ShardedCheckpointer(tmp_path, run.model, run.optimizer, extras=run.extras())
    try:
        run.train(3)
        result = ckpt.save(3).wait()
    finally:
        ckpt.close()
    assert result is not None
    assert result.error is None
    files = sorted(verify(tmp_path / "ckpt-0000000003-full").files)
    assert files == ["model.rank00000.bin", "model.rank00000.pt", "optimizer.rank00000.bin",
                     "optimizer.rank00000.pt", "train.pt"]  # fmt: skip
    restored = make_run(width=3000, init_seed=4)
    again = ShardedCheckpointer(tmp_path, restored.model, restored.optimizer,
                                extras=restored.extras())  # fmt: skip
    try:
        assert again.restore() == 3
    finally:
        again.close()
    assert_same_state(run, restored)


def test_a_compiled_model_saves_and_loads_plain_names(tmp_path: Path) -> None:
    run = make_run()
    compiled = torch.compile(run.model, backend="eager")
    assert any(k.startswith("_orig_mod.") for k in compiled.state_dict())
    ckpt = Checkpointer(tmp_path, compiled, run.optimizer, async_write=False)
    try:
        ckpt.save(1).wait()
    finally:
        ckpt.close()
    saved = torch.load(tmp_path / "ckpt-0000000001-full" / "model.pt", weights_only=True)
    assert not any("_orig_mod" in key for key in saved["skeleton"])
    plain = make_run(init_seed=3)
    back = Checkpointer(tmp_path, plain.model, plain.optimizer, async_write=False)
    try:
        assert back.restore() == 1
    finally:
        back.close()
    for name, value in run.model.state_dict().items():
        assert torch.equal(value, plain.model.state_dict()[name]), name


@pytest.mark.parametrize(
    ("writer", "reader", "refusal"),
    [
        (Checkpointer, ShardedCheckpointer, "written by Checkpointer, not sharded"),
        (ShardedCheckpointer, Checkpointer, "restore it with ShardedCheckpointer"),
    ],
)
def test_each_kind_refuses_the_others_checkpoint_instead_of_starting_afresh(
    tmp_path: Path, writer: type[Checkpointer], reader: type[Checkpointer], refusal: str
) -> None:
    run = make_run()
    for kind in (writer, reader):
        ckpt = kind(tmp_path, run.model, run.optimizer, async_write=False)
        try:
            if kind is writer:
                ckpt.save(2).wait()
            else:
                with pytest.raises(ValueError, match=refusal):
                    ckpt.restore()
        finally:
            ckpt.close()
