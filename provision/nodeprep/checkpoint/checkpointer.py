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
from nodeprep.checkpoint.dataset import check_dataset_version
from nodeprep.checkpoint.durable import CheckpointWriteError, sweep_leftovers
from nodeprep.checkpoint.finite import (
    NONFINITE_POLICIES,
    QUARANTINE_DIR,
    NonFiniteStateError,
    nonfinite_reason,
)
from nodeprep.checkpoint.manifest import CheckpointInvalidError, check_sizes, parse_name
from nodeprep.checkpoint.store import LoadedCheckpoint, committed, load_latest
from nodeprep.checkpoint.writer import AsyncWriter, SaveResult, SyncWriter, write_and_prune

log = logging.getLogger(__name__)


COPIES = ("shared", "node")  # one copy on a shared filesystem, or one on every node


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], /) -> Any: ...


class Checkpointer:
    """Saves (asynchronously by default) and restores model, optimizer, extras, RNG and step.

    Only rank 0 writes; every rank's RNG and extras are gathered into rank 0's
    ``train.pt``. Model and optimizer state are taken from rank 0 as-is, which
    is correct for data-parallel (replicated) training and wrong for sharded
    (FSDP/tensor-parallel) state, which this class does not handle.

    ``copies="node"``: nodes without a shared filesystem (local NVMe, one EBS volume each).
    Every node's local rank 0 writes the same checkpoint to its own ``root`` (the state is
    replicated, and every rank's RNG and extras reach every rank), and a resume loads the
    newest checkpoint that verifies on every node, each node from its own copy.
    """

    sharded = False  # each rank writes its own shards (ShardedCheckpointer)

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
        nonfinite: str = "refuse",
        dataset_version: str | None = None,
        allow_dataset_change: bool = False,
        copies: str = "shared",
    ) -> None:
        if copies not in COPIES:
            raise ValueError(f"copies must be one of {COPIES}, got {copies!r}")
        self.copies = copies
        if nonfinite not in NONFINITE_POLICIES:
            raise ValueError(f"nonfinite must be one of {NONFINITE_POLICIES}, got {nonfinite!r}")
        self.nonfinite = nonfinite
        # The version hash of the data the run trains on (nodeprep.data's manifest): saved
        # with every checkpoint; a resume on other data is refused unless allowed.
        self.dataset_version, self.allow_dataset_change = dataset_version, allow_dataset_change
        self.root, self.model, self.optimizer = root, model, optimizer
        self.extras = extras or {}
        self.config = config or {}
        self.stop_on_error = stop_on_error
        self.resume_from_light = resume_from_light
        self.last_committed: SaveResult | None = None
        self.history: list[SaveResult] = []
        self.failures: list[SaveResult] = []
        self.parts: list[SaveResult] = []  # sharded saves' parts this rank wrote (not rank 0)
        self._latest: SaveResult | None = None  # the newest result collected, failed or not
        self.restored: LoadedCheckpoint | None = None  # what restore() loaded, with its timings
        self._submitted = 0  # saves handed to the writer; the n-th result is the n-th save's
        self._by_seq: dict[int, SaveResult] = {}
        self.is_writer = self._writes_here()
        self._writer: AsyncWriter | SyncWriter | None = None
        self._keeps = {"full": keep, "light": keep_light}
        self._sweep()
        if self.is_writer:
            keeps = self._keeps
            self._writer = AsyncWriter(root, keeps) if async_write else SyncWriter(root, keeps)

    def _writes_here(self) -> bool:
        """Whether this rank writes checkpoints: rank 0, or each node's local rank 0."""
        return dist_util.speaks_for_node(self.copies)

    def _sweep(self) -> None:
        """Remove what crashed writers left, before this run's first save."""
        if self.is_writer:
            sweep_leftovers(self.root)

    def save(self, step: int, layer: str = "full", loss: float | None = None) -> SaveHandle:
        """Snapshot now and commit in the background; returns a handle to wait on (its
        ``blocked_s`` is the time the caller was blocked).

        The previous save's result is collected and checked before this one is
        submitted, so with ``stop_on_error`` a failure stops the run before
        another save starts; a synchronous write's own failure is checked at once.
        A state whose parameters or ``loss`` are not finite is never committed as a
        checkpoint (see finite.py): refused, or written aside under ``quarantine``.
        """
        started = time.monotonic()
        reason = self._nonfinite(loss)
        if reason is not None:
            refused = self._set_aside(step, layer, reason)
            return SaveHandle(self, step, layer, time.monotonic() - started, None, refused)
        self._prepare_save(step, layer)
        per_rank = dist_util.gather_all(self._rank_state())
        seq: int | None = None
        if self._writer is not None:
            self._check(self._writer.collect(block=True))
            payloads = self._payloads(step, layer, per_rank)
            extra = self._save_extra(len(per_rank))
            self._writer.submit(step, layer, payloads, extra)
            seq, self._submitted = self._submitted, self._submitted + 1  # submitted: it will report
            self._check(self._writer.collect(block=False))
        return SaveHandle(self, step, layer, time.monotonic() - started, seq, None)

    def save_and_wait(
        self, step: int, layer: str = "full", loss: float | None = None
    ) -> SaveResult | None:
        """Save and block until committed (emergency saves); the writing rank gets the result.

        The result is this save's, wherever it was collected: a save written in the calling
        process (``async_write=False``, or while the writer process starts) has been
        collected by ``save`` already.
        """
        self.save(step, layer, loss)
        self.wait()
        dist_util.barrier()
        mine = [r for r in (*self.history, *self.failures) if (r.step, r.layer) == (step, layer)]
        return max(mine, key=lambda r: r.committed_time, default=None)

    def wait_for_writer(self, timeout_s: float = 120.0) -> bool:
        """Block until the background writer process takes saves (until then they are written
        in this process); True at once without one. For tests and benchmarks of the async path."""
        if isinstance(self._writer, AsyncWriter):
            return self._writer.wait_ready(timeout_s)
        return True

    def poll(self) -> list[SaveResult]:
        """Check, without blocking, every save that ended since the last look; call every step.

        This is how a background write's failure reaches the training loop at
        the first step boundary after the writer reports it (raising
        CheckpointWriteError with ``stop_on_error``), not at the next save.
        """
        if self._writer is None:
            return []
        results = self._writer.collect(block=False)
        self._check(results)
        return results

    def wait(self) -> SaveResult | None:
        """Block until the in-flight save (if any) ends and check every result not yet checked.

        Returns the newest of them (the one that was in flight), or where nothing was, the
        newest result collected before (a save written in this process), on rank 0.
        """
        if self._writer is None:
            return None
        results = self._writer.collect(block=True)
        self._check(results)
        return results[-1] if results else self._latest

    def ensure_durable(self, step: int) -> None:
        """Raise CheckpointWriteError unless a full checkpoint of ``step`` committed (all ranks).

        What a run may report as success rests on this: the final state is on
        disk, verified by its writer. Rank 0 decides and tells every rank, so all
        of them raise (or none does).
        """
        error: str | None = None
        if self._writer is not None:
            self._record(self._writer.collect(block=True))
            error = self._not_durable(step)
        error = next((e for e in dist_util.gather_all(error) if e is not None), None)
        if error is not None:
            raise CheckpointWriteError(error)

    def restore(self) -> int | None:
        """Load the newest verified checkpoint into everything; returns its step or None."""
        loaded = self._load_agreed()
        if loaded is None:
            return None
        if bool(loaded.manifest.extra.get("sharded")) != self.sharded:
            raise ValueError(
                f"{loaded.path} was written by ShardedCheckpointer (each rank its own shards); "
                "restore it with ShardedCheckpointer"
            )
        payloads = loaded.payloads
        train = payloads["train.pt"]
        ranks = train["ranks"]
        if len(ranks) != dist_util.world_size():
            raise ValueError(
                f"{loaded.path} was written by {len(ranks)} rank(s) and this run has "
                f"{dist_util.world_size()}; resume with the same world size"
            )
        check_dataset_version(
            loaded.path, train.get("dataset_version"), self.dataset_version,
            allow_change=self.allow_dataset_change,
        )  # fmt: skip
        self._apply(loaded)
        mine = ranks[dist_util.rank()]
        for name, component in self.extras.items():
            component.load_state_dict(mine["extras"][name])
        rng.restore(mine["rng"])
        self.restored = loaded
        timings = loaded.timings
        log.info(
            "resumed from %s at step %d (hashing %.2f s, loading %.2f s)", loaded.path,
            loaded.manifest.step, timings.get("verify_s", 0), timings.get("load_s", 0),
        )  # fmt: skip
        return loaded.manifest.step

    def _apply(self, loaded: LoadedCheckpoint) -> None:
        """Put the loaded model and optimizer state in place."""
        payloads = loaded.payloads
        _unwrap(self.model).load_state_dict(payloads["model.pt"])
        if "optimizer.pt" in payloads:
            self.optimizer.load_state_dict(payloads["optimizer.pt"])
        else:
            log.warning("%s is a light checkpoint: optimizer state starts afresh", loaded.path.name)

    def close(self) -> None:
        """Wait for the last write and stop the writer; never raises.

        It runs in ``finally`` blocks, where an exception would bury the one
        already on its way out; a failure found here is logged as an error. Call
        ``wait()`` or ``ensure_durable()`` first to act on a failed last save.
        """
        if self._writer is None:
            return
        try:
            self._record(self._writer.collect(block=True))
        except CheckpointWriteError as exc:
            log.error("%s", exc)
        finally:
            self._writer.close()
            self._writer = None

    def _nonfinite(self, loss: float | None) -> str | None:
        """Every rank's verdict, agreed: a save is a collective, all ranks take one path."""
        local = nonfinite_reason(_unwrap(self.model), loss)
        if not dist_util.any_rank(local is not None):
            return None
        reasons = [str(r) for r in dist_util.gather_all(local) if r is not None]
        return reasons[0]

    def _set_aside(self, step: int, layer: str, reason: str) -> SaveResult:
        """Refuse the save (or write it under quarantine/), count it failed, say why."""
        aside = ""
        if self.nonfinite == "quarantine":
            per_rank = dist_util.gather_all(self._rank_state())
            if self.is_writer:
                done = write_and_prune(
                    self.root / QUARANTINE_DIR, step, layer, self._payloads(step, layer, per_rank),
                    keep=self._keeps[layer], extra={"world_size": len(per_rank)},
                )  # fmt: skip
                aside = f"; written aside to {done.path}" if done.path else f"; {done.error}"
        newest = self.last_committed.path if self.last_committed else None
        message = (
            f"checkpoint of step {step} not committed: {reason} (nonfinite={self.nonfinite}"
            f"{aside}); the newest checkpoint is {newest or 'none'}"
        )
        log.error("%s", message)
        refused = SaveResult(step, layer, None, message, time.time(), 0.0, 0)
        self.failures.append(refused)
        if self.stop_on_error:
            raise NonFiniteStateError(message)
        return refused

    def _rank_state(self) -> dict[str, Any]:
        extras = {name: c.state_dict() for name, c in self.extras.items()}
        return {"rng": rng.capture(), "extras": extras}

    def _prepare_save(self, step: int, layer: str) -> None:
        """Run by every rank before the state is gathered (a sharded save agrees on names)."""

    def _save_extra(self, world_size: int) -> dict[str, Any]:
        """What the manifest's ``extra`` records (and, sharded, what the writer needs)."""
        return {"world_size": world_size}

    def _payloads(self, step: int, layer: str, per_rank: list[Any]) -> dict[str, Any]:
        train = {"step": step, "ranks": per_rank, "config": self.config,
                 "dataset_version": self.dataset_version}  # fmt: skip
        payloads: dict[str, Any] = {"model.pt": _unwrap(self.model).state_dict(), "train.pt": train}
        if layer == "full":
            payloads["optimizer.pt"] = self.optimizer.state_dict()
        return payloads

    def _load_agreed(self) -> LoadedCheckpoint | None:
        """Rank 0 chooses (newest full that verifies, else newest light if allowed); all load it."""
        # A sharded checkpoint is refused before any of its shards is hashed or loaded.
        refusals = dist_util.gather_all(self._sharded_refusal() if self.is_writer else None)
        refusal = next((r for r in refusals if r is not None), None)
        if refusal is not None:
            raise ValueError(refusal)
        if self.copies == "node":
            return self._load_agreed_per_node()
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

    def _sharded_refusal(self) -> str | None:
        """The refusal when the newest checkpoint with a readable manifest is sharded."""
        for path in committed(self.root):
            try:
                manifest = check_sizes(path)
            except CheckpointInvalidError:
                continue
            if manifest.extra.get("sharded"):
                return (
                    f"{path} was written by ShardedCheckpointer (each rank its own shards); "
                    "restore it with ShardedCheckpointer"
                )
            return None
        return None

    def _load_agreed_per_node(self) -> LoadedCheckpoint | None:
        """The newest checkpoint every node has and can verify, each node loading its own copy.

        Candidates are the names every node's writer lists (full ones newest first, then
        light ones if allowed); each is tried on every rank, and the first that verifies
        everywhere is the one all ranks resume from.
        """
        layers = ("full", "light") if self.resume_from_light else ("full",)
        mine = [path.name for path in committed(self.root, layers)] if self.is_writer else None
        lists = [set(names) for names in dist_util.gather_all(mine) if names is not None]
        common = set.intersection(*lists) if lists else set()
        parsed = {name: parse_name(name) or (0, "light") for name in common}
        order = sorted(common, key=lambda n: (parsed[n][1] == "full", parsed[n][0]), reverse=True)
        for name in order:
            loaded = load_latest(self.root, layers, only=name)
            if not dist_util.any_rank(loaded is None):
                return loaded
            log.warning("%s does not verify on every node; trying an older one", name)
        if any(names != lists[0] for names in lists):
            # The nodes disagree (one lost its disk, one's saves failed): starting afresh
            # would silently throw away the others' training, so refuse instead.
            raise CheckpointWriteError(
                f"the nodes share no checkpoint under {self.root} that verifies on every node "
                "(some nodes have checkpoints the others lack); copy the newest checkpoint "
                "directory to every node, or move the checkpoints aside to start afresh"
            )
        return None

    def _not_durable(self, step: int) -> str | None:
        """Why no full checkpoint of ``step`` committed (its save's own error if it failed)."""
        if any(r.step == step and r.layer == "full" for r in self.history):
            return None
        for result in reversed(self.failures):
            if result.step == step and result.layer == "full" and result.error:
                return result.error
        return f"no full checkpoint of step {step} was saved in {self.root}"

    def _check(self, results: list[SaveResult]) -> None:
        """Record every result, then raise for the first failure when told to stop on errors."""
        failures = self._record(results)
        if failures and self.stop_on_error:
            raise CheckpointWriteError(failures[0].error)

    def _record(self, results: list[SaveResult]) -> list[SaveResult]:
        """Log and remember each result (all of them, so none is lost); returns the failed ones."""
        failed: list[SaveResult] = []
        for result in results:
            self._latest = result
            # Writers hand results back in the order saves were submitted.
            self._by_seq[len(self._by_seq)] = result
            if result.error is not None:
                log.error("%s", result.error)
                self.failures.append(result)
                failed.append(result)
                continue
            if result.part:  # written, not committed: rank 0 commits (ShardedCheckpointer)
                self.parts.append(result)
                log.info("wrote this rank's part of %s (%.2f s, %d bytes)", result.path,
                         result.write_seconds, result.nbytes)  # fmt: skip
                continue
            self.last_committed = result
            self.history.append(result)
            log.info(
                "committed %s (%.2f s, %d bytes)", result.path, result.write_seconds, result.nbytes
            )
        return failed


class SaveHandle:
    """One ``save()``: how long it blocked the caller, and its result once it has ended."""

    def __init__(
        self,
        owner: Checkpointer,
        step: int,
        layer: str,
        blocked_s: float,
        seq: int | None,
        result: SaveResult | None,
    ) -> None:
        self.step, self.layer, self.blocked_s = step, layer, blocked_s
        self._owner, self._seq, self._result = owner, seq, result

    def done(self) -> bool:
        """Whether the save has ended (without blocking); at once on ranks that write nothing."""
        if self._result is not None or self._seq is None:
            return True
        if self._seq not in self._owner._by_seq:
            self._owner.poll()
        return self._seq in self._owner._by_seq

    def wait(self) -> SaveResult | None:
        """Block until this save has ended; its result (committed or failed), None on ranks
        that write nothing. Raises as ``Checkpointer.wait`` does under ``stop_on_error``."""
        if self._result is None and self._seq is not None:
            if self._seq not in self._owner._by_seq:
                self._owner.wait()
            self._result = self._owner._by_seq.get(self._seq)
        return self._result


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose state dict has the plain names: inside DDP (``module.``) and
    ``torch.compile`` (``_orig_mod.``) wrappers, in any nesting."""
    while True:
        inner = getattr(model, "_orig_mod", None)
        if not isinstance(inner, torch.nn.Module):
            inner = getattr(model, "module", None)
        if not isinstance(inner, torch.nn.Module):
            return model
        model = inner
