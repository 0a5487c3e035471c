"""Whether a state is worth a checkpoint: a run whose weights or loss turned NaN or Inf.

Such a checkpoint would be the newest; retention would keep it and drop older good ones, and
a resume would pick it. So the checkpointer refuses it (``nonfinite="refuse"``, the default)
or writes it aside, under ``<root>/quarantine/``, where neither resume nor retention looks
(``nonfinite="quarantine"``, for a post-mortem). Either way the save counts as failed: it
is logged, ``ensure_durable`` of that step raises, and ``stop_on_error`` stops the run.
"""

from __future__ import annotations

import math

import torch
from torch.distributed.tensor import DTensor

from nodeprep.checkpoint.durable import CheckpointWriteError

NONFINITE_POLICIES = ("refuse", "quarantine")
QUARANTINE_DIR = "quarantine"
_NAMES_SHOWN = 3


class NonFiniteStateError(CheckpointWriteError):
    """A checkpoint was not committed because the state is not finite."""


def nonfinite_reason(model: torch.nn.Module, loss: float | None = None) -> str | None:
    """Why the state must not be checkpointed (one phrase), or None when it is finite.

    It runs inside every save, so it is cheap: one sum per floating-point parameter (16-bit
    ones summed in float32, where a sum rarely overflows), the verdicts stacked on the device
    and read back with one synchronisation. A NaN or an Inf carries through a sum, so a
    finite sum clears its tensor; only a tensor whose sum is not finite (a NaN or Inf in it,
    or finite values whose sum overflowed) is looked at element by element, with a second
    synchronisation. On the 110 MiB benchmark model this takes about 4 ms where an element-wise
    `isfinite` over every parameter took about 86 ms, most of a save's stall.
    """
    if loss is not None and not math.isfinite(loss):
        return f"the loss is {loss}"
    # A sharded parameter (DTensor) is judged by this rank's shard; the ranks agree after.
    named = [
        (name, local)
        for name, p in model.named_parameters()
        if (local := _local(p.detach())).is_floating_point() or local.is_complex()
    ]
    if not named:
        return None
    sums_finite = torch.stack([torch.isfinite(_sum(p)) for _, p in named]).tolist()
    suspects = [(name, p) for (name, p), ok in zip(named, sums_finite, strict=True) if not ok]
    if not suspects:
        return None
    verdicts = torch.stack([torch.isfinite(_widened(p)).all() for _, p in suspects]).tolist()
    bad = [name for (name, _), ok in zip(suspects, verdicts, strict=True) if not ok]
    if not bad:
        return None
    shown = ", ".join(bad[:_NAMES_SHOWN]) + (", ..." if len(bad) > _NAMES_SHOWN else "")
    return f"{len(bad)} parameter tensor(s) hold NaN or Inf ({shown})"


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _sum(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.is_floating_point() and tensor.element_size() < 4:
        return tensor.sum(dtype=torch.float32)
    return tensor.sum()


def _widened(tensor: torch.Tensor) -> torch.Tensor:
    """8-bit floats as float32 (torch has no isfinite for them); any other tensor as it is."""
    if tensor.is_floating_point() and tensor.element_size() == 1:
        return tensor.float()
    return tensor
