"""Recovery time for benchmarks/checkpoint.py: from SIGKILL to the first resumed step.

A training process saves a full checkpoint (ours, or a plain ``torch.save`` of both state
dicts, fsynced) and trains on; it is killed with SIGKILL, and a fresh process resumes at
once. The resumed process reports when its imports and model were ready, how long finding
and hashing the checkpoint took (ours only: a plain ``torch.load`` checks nothing), how long
loading took, and when its first step ended. The files are still in the page cache, as
after a process death; after a reboot the reads come from the disk.

Run by checkpoint.py; ``python checkpoint_recovery.py child ...`` is the child side.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MODES = ("nodeprep", "torch_load")


def _child(mode: str, role: str, directory: Path, model_mb: float) -> None:
    import torch

    from nodeprep.checkpoint import Checkpointer, ResumableSampler
    from nodeprep.trainer.model import SyntheticData, build_model

    imported = time.time()
    torch.manual_seed(0)
    model = build_model(model_mb)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data, sampler = SyntheticData(4096, 0), ResumableSampler(4096, 32, 0)

    def step() -> None:
        inputs, labels = data.batch(sampler.next_batch(), torch.device("cpu"))
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), labels).backward()  # type: ignore[no-untyped-call]
        optimizer.step()

    plain = directory / "plain.pt"
    if role == "train":
        step()
        if mode == "nodeprep":
            ckpt = Checkpointer(directory, model, optimizer, async_write=False)
            ckpt.save(1).wait()
            ckpt.ensure_durable(1)
        else:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            with open(plain, "wb") as handle:
                torch.save(state, handle)
                handle.flush()
                os.fsync(handle.fileno())
        print("saved", flush=True)
        while True:
            step()
    built = time.time()
    verify_s = 0.0
    if mode == "nodeprep":
        ckpt = Checkpointer(directory, model, optimizer, async_write=False)
        assert ckpt.restore() == 1
        assert ckpt.restored is not None
        verify_s = ckpt.restored.timings["verify_s"]
    else:
        state = torch.load(plain, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    loaded = time.time()
    step()
    stepped = time.time()
    report = {"imported": imported, "built": built, "verify_s": verify_s, "loaded": loaded,
              "stepped": stepped}  # fmt: skip
    print(json.dumps(report), flush=True)


def _spawn(mode: str, role: str, directory: Path, model_mb: float) -> subprocess.Popen[str]:
    args = [sys.executable, __file__, "child", mode, role, str(directory), str(model_mb)]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)


def _one(mode: str, directory: Path, model_mb: float) -> dict[str, float]:
    directory.mkdir(parents=True, exist_ok=True)
    trainer = _spawn(mode, "train", directory, model_mb)
    assert trainer.stdout is not None
    line = trainer.stdout.readline()
    if line.strip() != "saved":
        trainer.kill()
        raise RuntimeError(f"the training child said {line!r} instead of saved")
    time.sleep(0.5)
    trainer.send_signal(signal.SIGKILL)
    trainer.wait()
    killed = time.time()
    resumed = _spawn(mode, "resume", directory, model_mb)
    out, _ = resumed.communicate(timeout=600)
    if resumed.returncode != 0:
        raise RuntimeError(f"the resuming child exited {resumed.returncode}")
    report = json.loads(out.strip().splitlines()[-1])
    return {
        "start_s": report["built"] - killed,  # interpreter, imports, model and optimizer built
        "verify_s": report["verify_s"],
        "load_s": report["loaded"] - report["built"] - report["verify_s"],
        "first_step_s": report["stepped"] - report["loaded"],
        "total_s": report["stepped"] - killed,
    }


def recovery(workdir: Path, model_mb: float, repeats: int) -> dict[str, dict[str, float]]:
    """Medians per mode of each phase, modes interleaved run by run."""
    samples: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for index in range(repeats):
        for mode in MODES:
            directory = workdir / f"{mode}{index}"
            samples[mode].append(_one(mode, directory, model_mb))
            subprocess.run(["rm", "-rf", str(directory)], check=True)
    medians: dict[str, dict[str, float]] = {}
    for mode, runs in samples.items():
        medians[mode] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        phases = ", ".join(f"{k} {v:.2f}" for k, v in medians[mode].items())
        print(f"recovery {mode} (median of {len(runs)}): {phases}", flush=True)
    return medians


def summary(medians: dict[str, dict[str, Any]]) -> dict[str, float]:
    ours, plain = medians["nodeprep"], medians["torch_load"]
    return {
        "recovery_s": round(ours["total_s"], 2),
        "recovery_verify_s": round(ours["verify_s"], 2),
        "recovery_vs_torch_load_ratio": round(ours["total_s"] / plain["total_s"], 3),
    }


def main(argv: list[str]) -> None:
    _, mode, role, directory, model_mb = argv
    if mode not in MODES or role not in ("train", "resume"):
        raise SystemExit(f"unknown mode or role: {mode} {role}")
    _child(mode, role, Path(directory), float(model_mb))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        main(sys.argv[1:])
    else:
        raise SystemExit("run benchmarks/checkpoint.py; this file is its recovery part")
