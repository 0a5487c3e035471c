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

from nodeprep.data import ManifestError, build_manifest, check, read_manifest, write_manifest
from nodeprep.trainer.model import CLASSES, INPUT_DIM, TensorData

RECORD_BYTES = INPUT_DIM
SHARD_DIR = "shards"
TEACHER_SEED = 20240607


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


def load(root: Path) -> tuple[TensorData, str]:
    """The records of the data set at ROOT and its version, after a cheap check against its
    manifest (names and sizes): a missing or truncated shard is refused, never trained on."""
    try:
        manifest = read_manifest(root)
        problems = check(root, manifest, full=False)
    except ManifestError as exc:
        raise DataDirError(f"--data {root}: {exc}; stage it with the dataset role") from None
    if problems:
        shown = "; ".join(str(p) for p in problems[:3])
        raise DataDirError(f"--data {root} differs from its manifest: {shown}; stage it again")
    shards = [e for e in manifest.files if e.path.startswith(f"{SHARD_DIR}/")]
    raw = b"".join((root / e.path).read_bytes()[: e.size - e.size % RECORD_BYTES] for e in shards)
    if not raw:
        raise DataDirError(f"--data {root} holds no record under {SHARD_DIR}/; nothing to train on")
    records = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(-1, RECORD_BYTES)
    inputs = records.to(torch.float32) / 127.5 - 1.0
    generator = torch.Generator().manual_seed(TEACHER_SEED)
    teacher = torch.randn(INPUT_DIM, CLASSES, generator=generator)
    return TensorData(inputs, (inputs @ teacher).argmax(dim=1)), manifest.version


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
