"""Data download benchmark: what K dropped connections cost a resumable, checksummed download.

Usage: python benchmarks/data_download.py [--quick] [--drops K] [--mib N] [--dir DIR]

One file (64 MiB; 16 MiB with --quick) is served by the flaky server of the
integration tests on 127.0.0.1, once cleanly and once with K connections cut
at evenly spaced offsets. Goodput is the bytes of the file delivered over the
bytes the server sent: 1.0 means no byte was sent twice, which is what
resuming at the exact offset should give. The last line is JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from nodeprep.data import RetryPolicy, download

SERVER_FILE = Path(__file__).resolve().parent.parent / "tests/integration/data/flaky_server.py"
POLICY = RetryPolicy(max_attempts=200, max_seconds=300, base_delay=0.01, max_delay=0.2)


def _flaky_server() -> ModuleType:
    """The tests' flaky server, loaded by path: the benchmark measures against the same faults."""
    spec = importlib.util.spec_from_file_location("flaky_server", SERVER_FILE)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the flaky server from {SERVER_FILE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def run_once(flaky: ModuleType, content: bytes, drops: int, workdir: Path) -> dict[str, Any]:
    """Download ``content`` once with ``drops`` cuts; figures as the server and client saw them."""
    dest = workdir / f"data-{drops}.bin"
    step = len(content) // (drops + 1)
    with flaky.FlakyServer(content) as server:
        server.faults.drops = [flaky.Drop(step * (i + 1)) for i in range(drops)]
        started = time.monotonic()
        result = download(server.url(), dest, hashlib.sha256(content).hexdigest(), policy=POLICY)
        seconds = time.monotonic() - started
        sent = server.bytes_sent
    assert dest.read_bytes() == content, "the downloaded file differs from the served one"
    dest.unlink()
    return {
        "seconds": seconds,
        "sent": sent,
        "resumes": result.resumes,
        "restarts": result.restarts,
        "attempts": result.attempts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 MiB and 4 drops")
    parser.add_argument("--drops", type=int, help="connections cut per download (default 16)")
    parser.add_argument("--mib", type=int, help="file size in MiB (default 64)")
    parser.add_argument("--dir", type=Path, help="where to download (default: a temp dir)")
    args = parser.parse_args()
    mib = args.mib or (16 if args.quick else 64)
    drops = args.drops if args.drops is not None else (4 if args.quick else 16)
    content = random.Random(0).randbytes(mib << 20)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        flaky = _flaky_server()
        clean = run_once(flaky, content, 0, Path(tmp))
        faulty = run_once(flaky, content, drops, Path(tmp))
    goodput = len(content) / faulty["sent"]
    print(f"file: {mib} MiB, {drops} dropped connections")
    print(f"clean:  {clean['seconds']:.2f} s, {mib / clean['seconds']:.0f} MiB/s")
    print(
        f"faulty: {faulty['seconds']:.2f} s, {mib / faulty['seconds']:.0f} MiB/s, "
        f"{faulty['resumes']} resumes, {faulty['restarts']} restarts, "
        f"{faulty['attempts']} attempts, {faulty['sent']} bytes sent"
    )
    print(f"goodput: {goodput:.4f} (bytes delivered / bytes sent)")
    summary = {
        "download_goodput_ratio": round(goodput, 4),
        "download_resumes": faulty["resumes"],
        "download_drops": drops,
        "download_mib": mib,
        "download_seconds": round(faulty["seconds"], 3),
        "download_clean_seconds": round(clean["seconds"], 3),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
