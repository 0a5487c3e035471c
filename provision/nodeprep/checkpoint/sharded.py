"""Checkpoints of sharded training (FSDP2, DTensor): every rank writes its own shards.

``ShardedCheckpointer`` takes the model and optimizer as ``Checkpointer`` does and reads
their state the way DCP users do, through ``torch.distributed.checkpoint.state_dict``
(``get_model_state_dict`` / ``get_optimizer_state_dict``): parameter names without the
DDP, FSDP or ``torch.compile`` wrappers, and optimizer state keyed by those names. Each
DTensor is saved as this rank's local shard, with its global shape and placements.

The guarantees of ``Checkpointer`` stay, over every rank's files:

- every rank writes its files (``model.rankNNNNN.pt``/``.bin``, ``optimizer.rankNNNNN.*``)
  into one temporary directory on the shared filesystem, in its own writer process;
- rank 0 (which also writes ``train.pt``: step, every rank's RNG and extras) waits for
  every rank's part, then commits one manifest over all files (sizes and sha256) with the
  same atomic rename; a rank whose write failed, or that never reports, fails the save
  naming the rank, and nothing new looks valid;
- a resume takes the newest checkpoint that verifies on every rank: each rank checks every
  file's size and hashes the files it loads; the first failure on any rank makes all ranks
  fall back to an older checkpoint, and the log says which file on which rank;
- retention, emergency saves, light checkpoints, the data set version and the NaN checks
  are the ones of ``Checkpointer``.

A resume needs the same world size and the same sharding (global shapes and placements);
anything else is refused in one sentence (resharding is DCP's job, not this format's).
The directory must be one that every rank sees (``copies="shared"``).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor

from nodeprep.checkpoint import distributed as dist_util
from nodeprep.checkpoint.checkpointer import Checkpointer
from nodeprep.checkpoint.durable import part_directory, sweep_leftovers
from nodeprep.checkpoint.manifest import CheckpointInvalidError, check_sizes, verify
from nodeprep.checkpoint.store import LoadedCheckpoint, committed, load_payloads
from nodeprep.checkpoint.writer import SaveResult

log = logging.getLogger(__name__)


def _rank_files(rank: int, layer_has_optimizer: bool = True) -> frozenset[str]:
    names = {f"model.rank{rank:05d}.pt", f"model.rank{rank:05d}.bin", "train.pt"}
    if layer_has_optimizer:
        names |= {f"optimizer.rank{rank:05d}.pt", f"optimizer.rank{rank:05d}.bin"}
    return frozenset(names)


def _walk(value: Any, path: tuple[Any, ...], visit: Any) -> Any:
    """A copy of nested dicts and lists with ``visit(path, leaf)`` in place of each leaf."""
    if isinstance(value, dict):
        return {key: _walk(item, (*path, key), visit) for key, item in value.items()}
    if isinstance(value, list):
        return [_walk(item, (*path, index), visit) for index, item in enumerate(value)]
    return visit(path, value)


def _to_local(state: dict[str, Any]) -> dict[str, Any]:
    """``{"state": ...}`` with each DTensor as its local shard, and ``layout`` recording
    [path, global shape, placements, local shape] for each of them."""
    layout: list[list[Any]] = []

    def visit(path: tuple[Any, ...], leaf: Any) -> Any:
        if isinstance(leaf, DTensor):
            local = leaf.to_local()
            layout.append([list(path), list(leaf.shape), str(leaf.placements), list(local.shape)])
            return local
        return leaf

    return {"state": _walk(state, (), visit), "layout": layout}


def _from_local(saved: dict[str, Any], current: dict[str, Any], where: str) -> dict[str, Any]:
    """The saved state with each local shard made a DTensor like the one ``current`` holds
    at that path; refuses (ValueError) a path, shape or placement that differs."""
    layouts = {tuple(entry[0]): entry for entry in saved["layout"]}
    here: dict[tuple[Any, ...], Any] = {}
    _walk(current, (), here.__setitem__)

    def visit(path: tuple[Any, ...], leaf: Any) -> Any:
        entry = layouts.pop(path, None)
        if entry is None:
            return leaf
        now = here.get(path)
        if not isinstance(now, DTensor):
            raise ValueError(f"{where}: {'/'.join(map(str, path))} was sharded and is not now")
        _, shape, placements, local_shape = entry
        if (list(now.shape), str(now.placements), list(now.to_local().shape)) != (
            shape, placements, local_shape,
        ):  # fmt: skip
            raise ValueError(
                f"{where}: {'/'.join(map(str, path))} was saved as {shape} sharded {placements} "
                f"(local {local_shape}) and this run has {list(now.shape)} sharded "
                f"{now.placements} (local {list(now.to_local().shape)}); resume with the same "
                "world size and sharding"
            )
        return DTensor.from_local(
            leaf, now.device_mesh, now.placements, shape=now.shape, stride=now.stride()
        )

    rebuilt: dict[str, Any] = _walk(saved["state"], (), visit)
    if layouts:
        raise ValueError(f"{where}: the saved layout names paths its state lacks")
    return rebuilt


class ShardedCheckpointer(Checkpointer):
    """``Checkpointer`` for sharded state: each rank writes its own shards; see the module."""

    sharded = True

    def __init__(
        self,
        root: Path,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        part_timeout_s: float = 600.0,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("copies", "shared") != "shared":
            raise ValueError("sharded checkpoints need one directory every rank sees")
        if kwargs.get("nonfinite", "refuse") != "refuse":
            raise ValueError("sharded checkpoints support nonfinite='refuse' only")
        self.part_timeout_s = part_timeout_s
        self._save_token = ""
        super().__init__(root, model, optimizer, **kwargs)

    def _writes_here(self) -> bool:
        return True

    def _sweep(self) -> None:
        if dist_util.rank() == 0:
            sweep_leftovers(self.root)
        dist_util.barrier()  # no rank writes before the sweep is over

    def _prepare_save(self, step: int, layer: str) -> None:
        """Rank 0 names this save's temporary directory, makes it and tells every rank: a rank
        that finds it gone later knows rank 0 gave the save up."""
        token = None
        if dist_util.rank() == 0:
            token = uuid.uuid4().hex[:12]
            with contextlib.suppress(OSError):  # its writer reports the failure
                part_directory(self.root, step, layer, token).mkdir(parents=True)
        self._save_token = str(dist_util.broadcast_from_zero(token))

    def _save_extra(self, world_size: int) -> dict[str, Any]:
        part = {"rank": dist_util.rank(), "world_size": world_size, "token": self._save_token,
                "timeout_s": self.part_timeout_s}  # fmt: skip
        return {"world_size": world_size, "sharded": True, "part": part}

    def save_and_wait(
        self, step: int, layer: str = "full", loss: float | None = None
    ) -> SaveResult | None:
        """As ``Checkpointer.save_and_wait``; every rank gets rank 0's result (the commit)."""
        return dist_util.broadcast_from_zero(super().save_and_wait(step, layer, loss))  # type: ignore[no-any-return]

    def _not_durable(self, step: int) -> str | None:
        """Rank 0 knows whether the save committed; another rank knows its own part only."""
        if dist_util.rank() == 0:
            return super()._not_durable(step)
        for result in reversed(self.failures):
            if result.step == step and result.layer == "full" and result.error:
                return result.error
        return None

    def _payloads(self, step: int, layer: str, per_rank: list[Any]) -> dict[str, Any]:
        rank = dist_util.rank()
        payloads = {f"model.rank{rank:05d}.pt": _to_local(get_model_state_dict(self.model))}
        if layer == "full":
            optim = get_optimizer_state_dict(self.model, self.optimizer)
            payloads[f"optimizer.rank{rank:05d}.pt"] = _to_local(optim)
        if rank == 0:
            payloads["train.pt"] = super()._payloads(step, layer, per_rank)["train.pt"]
        return payloads

    def _load_agreed(self) -> LoadedCheckpoint | None:
        """The newest checkpoint that verifies on every rank, each rank hashing its own files."""
        chosen: tuple[list[str], str | None] | None = None
        if dist_util.rank() == 0:
            candidates = committed(self.root, ("full",))
            if self.resume_from_light:
                candidates += committed(self.root, ("light",))
            chosen = [path.name for path in candidates], self._other_world(candidates)
        names, refusal = dist_util.broadcast_from_zero(chosen)
        if refusal is not None:
            raise ValueError(refusal)
        rejected: list[tuple[str, str]] = []
        for name in names:
            loaded, error = self._try(self.root / name)
            errors = dist_util.gather_all(error)
            if all(e is None for e in errors):
                assert loaded is not None
                return LoadedCheckpoint(
                    loaded.path, loaded.manifest, loaded.payloads, tuple(rejected), loaded.timings
                )
            for rank, reason in enumerate(errors):
                if reason is not None:
                    log.warning(
                        "checkpoint rejected on rank %d: %s; trying an older one", rank, reason
                    )
                    rejected.append((name, f"rank {rank}: {reason}"))
        return None

    def _other_world(self, candidates: list[Path]) -> str | None:
        """A refusal when the newest readable manifest is not sharded or of another world size:
        ranks would find no files of theirs, and falling back past it would start afresh."""
        for path in candidates:
            try:
                manifest = check_sizes(path)
            except CheckpointInvalidError:
                continue
            if not manifest.extra.get("sharded"):
                return f"{path} was written by Checkpointer, not sharded; restore it with that"
            written = manifest.extra.get("world_size")
            if written != dist_util.world_size():
                return (
                    f"{path} was written by {written} rank(s) and this run has "
                    f"{dist_util.world_size()}; resume with the same world size"
                )
            return None
        return None

    def _try(self, path: Path) -> tuple[LoadedCheckpoint | None, str | None]:
        mine = _rank_files(dist_util.rank(), layer_has_optimizer=path.name.endswith("-full"))
        try:
            started = time.monotonic()
            manifest = verify(path, only=mine)
            if not manifest.extra.get("sharded"):
                raise CheckpointInvalidError(f"{path.name}: not a sharded checkpoint")
            verified = time.monotonic()
            payloads = load_payloads(path, manifest, only=mine)
            timings = {"verify_s": verified - started, "load_s": time.monotonic() - verified}
        except CheckpointInvalidError as exc:
            return None, str(exc)
        except (OSError, RuntimeError, ValueError) as exc:  # one rank raising would hang the rest
            return None, f"{path.name}: {exc}"
        missing = [n for n in mine if n.endswith(".pt") and n not in payloads]
        if missing:
            return None, f"{path.name}: {', '.join(sorted(missing))} missing for this rank"
        return LoadedCheckpoint(path, manifest, payloads, (), timings), None

    def _apply(self, loaded: LoadedCheckpoint) -> None:
        rank, where = dist_util.rank(), loaded.path.name
        model_saved = loaded.payloads[f"model.rank{rank:05d}.pt"]
        model_state = _from_local(model_saved, get_model_state_dict(self.model), where)
        set_model_state_dict(self.model, model_state)
        optim_name = f"optimizer.rank{rank:05d}.pt"
        if optim_name in loaded.payloads:
            # The optimizer's state is created here (DCP steps it with zero gradients) so its
            # DTensors show the placements the saved shards must match.
            current = get_optimizer_state_dict(self.model, self.optimizer)
            optim = _from_local(loaded.payloads[optim_name], current, where)
            set_optimizer_state_dict(self.model, self.optimizer, optim)
        else:
            log.warning("%s is a light checkpoint: optimizer state starts afresh", where)
