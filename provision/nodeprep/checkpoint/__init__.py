"""Verified, atomic, asynchronous checkpoints with bit-exact resume (see README.md here)."""

from __future__ import annotations

from nodeprep.checkpoint.checkpointer import Checkpointer, SaveHandle, Stateful
from nodeprep.checkpoint.dataset import DatasetChangedError
from nodeprep.checkpoint.durable import CheckpointWriteError, commit_checkpoint
from nodeprep.checkpoint.emergency import EmergencyFlag, EmergencyRequest
from nodeprep.checkpoint.finite import NonFiniteStateError
from nodeprep.checkpoint.loader import ResumableLoader
from nodeprep.checkpoint.manifest import FORMAT_VERSION, CheckpointInvalidError, verify
from nodeprep.checkpoint.sampler import ResumableSampler
from nodeprep.checkpoint.sharded import ShardedCheckpointer
from nodeprep.checkpoint.store import committed, load_latest, load_verified
from nodeprep.checkpoint.writer import SaveResult

__all__ = [
    "FORMAT_VERSION",
    "CheckpointInvalidError",
    "CheckpointWriteError",
    "Checkpointer",
    "DatasetChangedError",
    "EmergencyFlag",
    "EmergencyRequest",
    "NonFiniteStateError",
    "ResumableLoader",
    "ResumableSampler",
    "SaveHandle",
    "SaveResult",
    "ShardedCheckpointer",
    "Stateful",
    "commit_checkpoint",
    "committed",
    "load_latest",
    "load_verified",
    "verify",
]
