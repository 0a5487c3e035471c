"""The reference training loop: resume if possible, train, checkpoint in layers, obey signals."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.distributed as dist
from torch import nn

from nodeprep import contract
from nodeprep.checkpoint import Checkpointer, EmergencyFlag, ResumableLoader, ResumableSampler
from nodeprep.checkpoint import distributed as dist_util
from nodeprep.progress import Phase, ProgressWriter
from nodeprep.trainer import shards
from nodeprep.trainer.model import Samples, SyntheticData, TensorData, build_model
from nodeprep.trainer.statehash import final_state, state_hash

log = logging.getLogger(__name__)
EXIT_PREEMPTED = 143


@dataclass(frozen=True)
class TrainConfig:
    run_dir: Path
    steps: int
    seed: int
    checkpoint_every: int
    full_every: int
    keep: int = 3
    model_mb: float = 1.0
    batch_size: int = 32
    num_samples: int = 4096
    lr: float = 1e-3
    device: str = "cpu"
    async_write: bool = True
    stop_on_save_error: bool = False
    log_every: int = 1
    nonfinite: str = "refuse"  # a NaN/Inf state: refused, or checkpointed under quarantine/
    stop_on_nonfinite_loss: bool = False
    drill_nan_at: int = 0  # fault drill: the weights turn NaN before this step (0: never)
    workers: int | None = None  # DataLoader workers (ResumableLoader); None: in-memory batches
    data: Path | None = None  # a staged data set (shards + manifest); None: synthetic data
    cache: Path | None = None  # where --data's preprocessed shards are kept (PreprocessCache)
    allow_dataset_change: bool = False  # resume although the data set's version changed
    min_step_s: float = 0.0  # drills: each step lasts at least this long (the state is unchanged)
    checkpoint_copies: str = "shared"  # one copy on a shared filesystem, or one per node
    until_step: int = 0  # end after this step as after the last (0: steps); LR schedule: steps

    @property
    def last_step(self) -> int:
        return min(self.steps, self.until_step) if self.until_step else self.steps

    def layer_for(self, step: int) -> str | None:
        """Which checkpoint (if any) is due after ``step`` completes."""
        if self.full_every and step % self.full_every == 0:
            return "full"
        if self.checkpoint_every and step % self.checkpoint_every == 0:
            return "light"
        return None


class TrainingStopped(Exception):
    """The run stopped on purpose (a non-finite loss); ``str()`` says why, for one line."""


@dataclass
class TrainResult:
    finished: bool
    step: int
    state_hash: str
    preempted: bool = False


class Trainer:
    """Owns the model, optimizer, data, checkpointer and signal flag for one run."""

    def __init__(self, config: TrainConfig, out: TextIO = sys.stdout) -> None:
        self.config, self.out = config, out
        # The rank that writes this node's checkpoints speaks: with a copy per node (what
        # `nodeprep run` sets up) each node's local rank 0, so every node's own train.log
        # shows the job's steps and `status` and `drill` read any node, not only the one
        # holding global rank 0; with one shared copy (and so one shared log) rank 0 alone.
        # The ranks step together and the state digest is gathered, so the nodes' lines agree
        # but for loss= (each rank's own batch) and t=. Decided once: _say runs every step.
        self.speaks = dist_util.speaks_for_node(config.checkpoint_copies)
        # Before anything slow: an unhandled SIGUSR1 would kill the process.
        self.flag = EmergencyFlag()
        self.flag.install()
        self.device = torch.device(config.device)
        torch.manual_seed(config.seed)
        model = build_model(config.model_mb).to(self.device)
        if dist_util.active():
            model = nn.parallel.DistributedDataParallel(model)
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, config.steps)
        self.extras: dict[str, Any] = {"scheduler": self.scheduler}
        self._data_source(config)
        plain = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(config).items()}
        self.checkpointer = Checkpointer(
            config.run_dir / "checkpoints",
            self.model,
            self.optimizer,
            extras=self.extras,
            config=plain,
            keep=config.keep,
            async_write=config.async_write,
            stop_on_error=config.stop_on_save_error,
            nonfinite=config.nonfinite,
            dataset_version=self.dataset_version,
            allow_dataset_change=config.allow_dataset_change,
            copies=config.checkpoint_copies,
        )
        self.step = 0
        self.loss: float | None = None
        # Set once the trainer is registered: the watchdog judges hangs from it.
        self.progress: ProgressWriter | None = None

    def train(self) -> TrainResult:
        """Resume, train to the end and return only once the final state is durable.

        A save that fails without ``--stop-on-save-error`` lets training go on,
        but a finished run whose final full checkpoint did not commit raises
        CheckpointWriteError: success must mean a resume would find this state.
        """
        resumed = self.checkpointer.restore()
        if resumed is None:
            seed = self.config.seed + 1000 * dist_util.rank()
            torch.manual_seed(seed)
            random.seed(seed)
            numpy = sys.modules.get("numpy")
            if numpy is not None:  # seeded from the OS at import: a run would differ from the next
                numpy.random.seed(seed)
        self.step = resumed or 0
        self._say(f"start step={self.step} resumed={resumed is not None}")
        try:
            if self._loop():
                return TrainResult(False, self.step, "", preempted=True)
            if resumed != self.step:  # trained: the final state must be on disk
                with self._blocking():
                    if self.config.layer_for(self.step) != "full":
                        self.checkpointer.save(self.step, "full", self.loss)
                    self.checkpointer.ensure_durable(self.step)
        finally:
            self.checkpointer.close()
            if self.config.workers is not None:
                self.loader.close()
        digest = state_hash(final_state(self.model, self.optimizer, self.extras))
        if dist_util.world_size() > 1:  # one digest over every rank's state (RNG differs by rank)
            digest = hashlib.sha256("".join(dist_util.gather_all(digest)).encode()).hexdigest()
        self._say(f"done step={self.step} state_sha256={digest}")
        return TrainResult(True, self.step, digest)

    def _loop(self) -> bool:
        """Train to the last step, checkpointing as configured; True when a signal says stop.

        The checkpointer is polled at every step boundary so that a background
        save's failure stops the run (``--stop-on-save-error``) within one step.
        """
        while self.step < self.config.last_step:
            began = time.monotonic()
            loss = self.loss = self._run_batch()
            self.step += 1
            if self.progress is not None:
                self.progress.step(self.step, loss)
            self._stop_if_not_finite(loss)
            if self.step % self.config.log_every == 0:
                self._say(f"step {self.step} loss={loss:.6f} t={time.time():.6f}")
            self.checkpointer.poll()
            self._pace(began)
            saved, must_exit = self._handle_emergency()
            if must_exit:
                return True
            layer = self.config.layer_for(self.step)
            if layer and not saved:
                with self._blocking():  # the copy to host memory blocks the loop
                    self.checkpointer.save(self.step, layer, loss)
        return False

    def _pace(self, began: float) -> None:
        """With ``min_step_s``: wait out the rest of the step (before the signal check, so a
        signal that arrives meanwhile is handled at this step's boundary)."""
        left = self.config.min_step_s - (time.monotonic() - began)
        if left > 0:
            time.sleep(left)

    def _stop_if_not_finite(self, loss: float) -> None:
        """With ``stop_on_nonfinite_loss``: stop at the first step any rank's loss is NaN/Inf."""
        if not self.config.stop_on_nonfinite_loss:
            return
        if dist_util.any_rank(not math.isfinite(loss)):
            newest = self.checkpointer.last_committed
            raise TrainingStopped(
                f"the loss is not finite ({loss} on rank {dist_util.rank()}) at step {self.step}; "
                f"the newest checkpoint is {newest.path if newest else 'none'}"
            )

    def _blocking(self) -> contextlib.AbstractContextManager[None]:
        """The loop waits on a save: the watchdog allows a checkpoint's time between steps."""
        if self.progress is None:
            return contextlib.nullcontext()
        return self.progress.phase(Phase.CHECKPOINT)

    def _data_source(self, config: TrainConfig) -> None:
        """Batches cut in the training process (the default), or with ``--workers N`` from a
        DataLoader with N workers; either position travels in the checkpoint's extras."""
        rank, world = dist_util.rank(), dist_util.world_size()
        data: TensorData
        if config.data is None:
            data, self.dataset_version = SyntheticData(config.num_samples, config.seed), None
        else:
            data, self.dataset_version = shards.load(config.data, config.cache)
            self._say(f"data {config.data}: {len(data)} records, version {self.dataset_version}")
        if config.workers is None:
            self.data = data
            self.sampler = ResumableSampler(len(data), config.batch_size, config.seed, rank, world)
            self.extras["sampler"] = self.sampler
        else:
            self.loader = ResumableLoader(Samples(data), config.batch_size, config.seed, rank=rank,
                                          world_size=world, num_workers=config.workers)  # fmt: skip
            self.extras["loader"] = self.loader

    def _next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.config.workers is None:
            return self.data.batch(self.sampler.next_batch(), self.device)
        inputs, labels = self.loader.next_batch()
        return inputs.to(self.device), labels.to(self.device)

    def _run_batch(self) -> float:
        if self.step + 1 == self.config.drill_nan_at:
            with torch.no_grad():
                next(iter(self.model.parameters())).fill_(float("nan"))
        self.model.train()
        inputs, labels = self._next_batch()
        self.optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(self.model(inputs), labels)
        loss.backward()  # type: ignore[no-untyped-call]
        self.optimizer.step()
        self.scheduler.step()
        return float(loss.item())

    def _handle_emergency(self) -> tuple[bool, bool]:
        """Save now if any rank got a signal; returns (saved, the run must stop)."""
        if not dist_util.any_rank(self.flag.peek() is not None):
            return False, False
        requests = [r for r in dist_util.gather_all(self.flag.take()) if r is not None]
        first = min(requests, key=lambda r: r.signal_time)
        must_exit = any(r.should_exit for r in requests)
        with self._blocking():
            result = self.checkpointer.save_and_wait(self.step, "full", self.loss)
        if result is not None and result.path is not None:
            record = contract.EmergencyRecord(
                signal=first.signal_name,
                signal_time=first.signal_time,
                committed_time=result.committed_time,
                path=result.path,
                step=self.step,
            )
            contract.append_emergency_record(self.config.run_dir, record)
            self._say(
                f"emergency checkpoint step={self.step} signal={first.signal_name} "
                f"latency={result.committed_time - first.signal_time:.3f}s"
            )
        if must_exit:
            # Exit 143 says "saved, then stopped": only true once the save committed.
            with self._blocking():
                self.checkpointer.ensure_durable(self.step)
        return True, must_exit

    def _say(self, text: str) -> None:
        if self.speaks:
            print(text, file=self.out, flush=True)


def setup_distributed(device: str) -> str:
    """Join the torchrun process group if launched by torchrun; returns the device to use."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return device
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    timeout = collective_timeout()
    if device.startswith("cuda"):
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", timeout=timeout)
        return f"cuda:{local_rank}"
    dist.init_process_group("gloo", timeout=timeout)
    return device


COLLECTIVE_TIMEOUT_ENV = "NODEPREP_COLLECTIVE_TIMEOUT_S"


def collective_timeout() -> timedelta | None:
    """The collective timeout `nodeprep run` sets (None: PyTorch's default, 10 min for NCCL).

    A hung collective then fails in that time, and torchrun restarts the group from the
    newest checkpoint instead of every rank waiting out the default.
    """
    raw = os.environ.get(COLLECTIVE_TIMEOUT_ENV, "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds <= 86400:
        raise ValueError(
            f"{COLLECTIVE_TIMEOUT_ENV}={raw!r} is not a number of seconds in (0, 86400]"
        )
    return timedelta(seconds=seconds)
