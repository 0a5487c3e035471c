"""The library's front door: save and restore a training run's complete state.

What each layer holds (payload files inside the checkpoint directory):

- ``full``: ``model.pt`` (model state dict), ``optimizer.pt`` (optimizer state
  dict) and ``train.pt`` (step, every rank's RNG and extras such as the LR
  scheduler and the data sampler position, the run config). Enough for a
  bit-exact resume on its own.
- ``light``: ``model.pt`` and ``train.pt`` only, no optimizer state (with
  Adam that is a third of the bytes). Good for evaluation, export and as a
  warm start; resuming from it restarts the optimizer's moments, so it is
  never bit-exact and ``restore`` uses it only when asked to
  (``resume_from_light=True``) and no full checkpoint verifies.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Protocol

import torch

from nodeprep.checkpoint import distributed as dist_util
from nodeprep.checkpoint import rng
from nodeprep.checkpoint.durable import CheckpointWriteError, sweep_leftovers
from nodeprep.checkpoint.store import LoadedCheckpoint, load_latest
from nodeprep.checkpoint.writer import AsyncWriter, SaveResult, SyncWriter

log = logging.getLogger(__name__)


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], /) -> Any: ...


class Checkpointer:
    """Saves (asynchronously by default) and restores model, optimizer, extras, RNG and step.

    Only rank 0 writes; every rank's RNG and extras are gathered into rank 0's
    ``train.pt``. Model and optimizer state are taken from rank 0 as-is, which
    is correct for data-parallel (replicated) training and wrong for sharded
    (FSDP/tensor-parallel) state, which this class does not handle.
    """

    def __init__(
        self,
        root: Path,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        extras: dict[str, Stateful] | None = None,
        config: dict[str, Any] | None = None,
        keep: int = 3,
        keep_light: int = 2,
        async_write: bool = True,
        stop_on_error: bool = False,
        resume_from_light: bool = False,
    ) -> None:
        self.root, self.model, self.optimizer = root, model, optimizer
        self.extras = extras or {}
        self.config = config or {}
        self.stop_on_error = stop_on_error
        self.resume_from_light = resume_from_light
        self.last_committed: SaveResult | None = None
        self.history: list[SaveResult] = []
        self.is_writer = dist_util.rank() == 0
        self._writer: AsyncWriter | SyncWriter | None = None
        if self.is_writer:
            sweep_leftovers(root)
            keeps = {"full": keep, "light": keep_light}
            self._writer = AsyncWriter(root, keeps) if async_write else SyncWriter(root, keeps)

    def save(self, step: int, layer: str = "full") -> float:
        """Snapshot now and commit in the background; returns the seconds the caller was blocked."""
        started = time.monotonic()
        per_rank = dist_util.gather_all(self._rank_state())
        if self._writer is not None:
            self._check(self._writer.poll())
            payloads = self._payloads(step, layer, per_rank)
            self._writer.submit(step, layer, payloads, {"world_size": len(per_rank)})
        return time.monotonic() - started

    def save_and_wait(self, step: int, layer: str = "full") -> SaveResult | None:
        """Save and block until committed (emergency saves); rank 0 gets the result."""
        self.save(step, layer)
        result = self.wait()
        dist_util.barrier()
        return result

    def wait(self) -> SaveResult | None:
        """Block until the in-flight save (if any) ends; its result on rank 0."""
        if self._writer is None:
            return None
        result = self._writer.wait()
        self._check(result)
        return result

    def restore(self) -> int | None:
        """Load the newest verified checkpoint into everything; returns its step or None."""
        loaded = self._load_agreed()
        if loaded is None:
            return None
        payloads = loaded.payloads
        train = payloads["train.pt"]
        ranks = train["ranks"]
        if len(ranks) != dist_util.world_size():
            raise ValueError(
                f"{loaded.path} was written by {len(ranks)} rank(s) and this run has "
                f"{dist_util.world_size()}; resume with the same world size"
            )
        _unwrap(self.model).load_state_dict(payloads["model.pt"])
        if "optimizer.pt" in payloads:
            self.optimizer.load_state_dict(payloads["optimizer.pt"])
        else:
            log.warning("%s is a light checkpoint: optimizer state starts afresh", loaded.path.name)
        mine = ranks[dist_util.rank()]
        for name, component in self.extras.items():
            component.load_state_dict(mine["extras"][name])
        rng.restore(mine["rng"])
        log.info("resumed from %s at step %d", loaded.path, loaded.manifest.step)
        return loaded.manifest.step

    def close(self) -> None:
        if self._writer is not None:
            try:
                self._check(self._writer.wait())
            finally:
                self._writer.close()
                self._writer = None

    def _rank_state(self) -> dict[str, Any]:
        extras = {name: c.state_dict() for name, c in self.extras.items()}
        return {"rng": rng.capture(), "extras": extras}

    def _payloads(self, step: int, layer: str, per_rank: list[Any]) -> dict[str, Any]:
        train = {"step": step, "ranks": per_rank, "config": self.config}
        payloads: dict[str, Any] = {"model.pt": _unwrap(self.model).state_dict(), "train.pt": train}
        if layer == "full":
            payloads["optimizer.pt"] = self.optimizer.state_dict()
        return payloads

    def _load_agreed(self) -> LoadedCheckpoint | None:
        """Rank 0 chooses (newest full that verifies, else newest light if allowed); all load it."""
        chosen: LoadedCheckpoint | None = None
        if self.is_writer:
            chosen = load_latest(self.root, ("full",))
            if chosen is None and self.resume_from_light:
                chosen = load_latest(self.root, ("light",))
        name = dist_util.broadcast_from_zero(chosen.path.name if chosen else None)
        if name is None or self.is_writer:
            return chosen
        loaded = load_latest(self.root, ("full", "light"), only=name)
        if loaded is None:
            raise CheckpointWriteError(
                f"rank {dist_util.rank()} cannot verify {self.root / name}, which rank 0 chose; "
                "every rank needs the same checkpoint directory (a shared filesystem)"
            )
        return loaded

    def _check(self, result: SaveResult | None) -> None:
        if result is None:
            return
        if result.error is None:
            self.last_committed = result
            self.history.append(result)
            log.info(
                "committed %s (%.2f s, %d bytes)", result.path, result.write_seconds, result.nbytes
            )
            return
        log.error("%s", result.error)
        if self.stop_on_error:
            raise CheckpointWriteError(result.error)


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, torch.nn.Module) else model
