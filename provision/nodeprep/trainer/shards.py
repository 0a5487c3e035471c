"""A staged data set the reference trainer reads (``--data DIR``), and the script that makes one.

Layout: ``DIR/shards/*.bin`` plus ``DIR/dataset-manifest.json`` (``nodeprep.data``'s manifest,
which the ``dataset`` role writes when it stages the directory). Each shard is a run of
RECORD_BYTES-byte records; a record's INPUT_DIM bytes are the inputs (scaled to [-1, 1]) and
its label is what a fixed linear teacher says of them, so there is something to learn. A tail
shorter than a record is ignored. Any bytes are a valid data set, so random shards serve.

    python -m nodeprep.trainer.shards DIR [--shards 2] [--shard-bytes 1048576] [--seed 0]

writes such a data set with its manifest (what the lab stages onto its nodes).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch

from nodeprep.data import (
    ManifestEntry,
    ManifestError,
    PreprocessCache,
    build_manifest,
    check,
    read_manifest,
    write_manifest,
)
from nodeprep.trainer.model import CLASSES, INPUT_DIM, TensorData

RECORD_BYTES = INPUT_DIM
SHARD_DIR = "shards"
TEACHER_SEED = 20240607
# Names everything a cached shard depends on besides its bytes: change the preprocessing
# below, bump the version, and every cached shard is computed afresh.
CACHE_NAMESPACE = f"trainer-shards-v1-r{RECORD_BYTES}-t{TEACHER_SEED}"


class DataDirError(Exception):
    """The --data directory cannot be trained on; the message names it and the fix."""


def shard_bytes(seed: int, shard: int, size: int) -> bytes:
    """The deterministic content of one generated shard."""
    return random.Random(f"nodeprep-shards-{seed}-{shard}").randbytes(size)


def write_dataset(root: Path, shards: int, size: int, seed: int) -> str:
    """Write SHARDS shards of SIZE bytes and the manifest under ROOT; returns the version."""
    (root / SHARD_DIR).mkdir(parents=True, exist_ok=True)
    for shard in range(shards):
        path = root / SHARD_DIR / f"shard-{shard:03d}.bin"
        partial = path.with_suffix(".tmp")
        partial.write_bytes(shard_bytes(seed, shard, size))
        partial.replace(path)
    manifest = build_manifest(root)
    write_manifest(root, manifest)
    return manifest.version


def load(root: Path, cache: Path | None = None) -> tuple[TensorData, str]:
    """The records of the data set at ROOT and its version, after a cheap check against its
    manifest (names and sizes): a missing or truncated shard is refused, never trained on.
    With CACHE, each shard's preprocessed tensors are kept there (``PreprocessCache``, keyed
    by the shard's sha256) and read back instead of preprocessing it again."""
    try:
        manifest = read_manifest(root)
        problems = check(root, manifest, full=False)
    except ManifestError as exc:
        raise DataDirError(f"--data {root}: {exc}; stage it with the dataset role") from None
    if problems:
        shown = "; ".join(str(p) for p in problems[:3])
        raise DataDirError(f"--data {root} differs from its manifest: {shown}; stage it again")
    entries = [e for e in manifest.files if e.path.startswith(f"{SHARD_DIR}/")]
    store = PreprocessCache(cache, CACHE_NAMESPACE) if cache is not None else None
    parts = [_shard(root, entry, store) for entry in entries]
    parts = [part for part in parts if len(part[1])]
    if not parts:
        raise DataDirError(f"--data {root} holds no record under {SHARD_DIR}/; nothing to train on")
    inputs = torch.cat([part[0] for part in parts])
    labels = torch.cat([part[1] for part in parts])
    return TensorData(inputs, labels), manifest.version


def preprocess(raw: bytes) -> tuple[torch.Tensor, torch.Tensor]:
    """One shard's records: inputs scaled to [-1, 1], labels from the fixed teacher."""
    usable = raw[: len(raw) - len(raw) % RECORD_BYTES]
    records = torch.frombuffer(bytearray(usable), dtype=torch.uint8).view(-1, RECORD_BYTES)
    inputs = records.to(torch.float32) / 127.5 - 1.0
    teacher = torch.randn(INPUT_DIM, CLASSES, generator=torch.Generator().manual_seed(TEACHER_SEED))
    return inputs, (inputs @ teacher).argmax(dim=1)


def _shard(
    root: Path, entry: ManifestEntry, store: PreprocessCache | None
) -> tuple[torch.Tensor, torch.Tensor]:
    if store is None:
        return preprocess((root / entry.path).read_bytes())

    def compute() -> tuple[bytes, dict[str, int]]:
        inputs, labels = preprocess((root / entry.path).read_bytes())
        return tensor_bytes(inputs) + tensor_bytes(labels), {"records": len(labels)}

    payload, meta = store.get_or_compute(f"{entry.path}:{entry.sha256}", compute)
    records = int(meta["records"])
    split = records * INPUT_DIM * 4
    inputs = torch.frombuffer(bytearray(payload[:split]), dtype=torch.float32)
    labels = torch.frombuffer(bytearray(payload[split:]), dtype=torch.int64)
    return inputs.view(records, INPUT_DIM), labels


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """A CPU tensor's raw bytes (its own compact storage), for a cache entry."""
    return bytes(tensor.detach().cpu().contiguous().clone().untyped_storage())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nodeprep.trainer.shards",
        description="Write a data set the reference trainer reads with --data DIR.",
    )
    parser.add_argument("root", type=Path)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--shard-bytes", type=int, default=1 << 20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.shards < 1 or args.shard_bytes < RECORD_BYTES:
        parser.error(f"--shards must be at least 1 and --shard-bytes at least {RECORD_BYTES}")
    version = write_dataset(args.root, args.shards, args.shard_bytes, args.seed)
    print(f"{args.root}: {args.shards} shards of {args.shard_bytes} bytes, version {version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
