"""The dataset role, run by real ansible-playbook on this machine (local connection): a download
cut mid-body resumes, a controller file is proven on arrival, a second run transfers nothing,
verify catches a truncated file (sizes) and a same-size edit (full), and every refusal comes
before any byte is written. The HTTP server is the flaky server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeprep import paths
from nodeprep.data import build_manifest, read_manifest
from tmpfs import mounted_tmpfs

from .conftest import sha256
from .flaky_server import Drop, FlakyServer

pytestmark = pytest.mark.timeout(300)
PLAYBOOK = Path(__file__).with_name("stage.yml")
MIB = 1 << 20


def play(
    tmp_path: Path, datasets: list[dict[str, Any]], *args: str, **extra: Any
) -> tuple[int, str, dict[str, Any]]:
    """Run the playbook; its rc, its output and what it kept (checks, plan, staged)."""
    out = tmp_path / "out.json"
    out.unlink(missing_ok=True)
    collections = paths.link_collection(tmp_path / "collections")
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_NOCOLOR": "1"}
    variables = {
        "datasets": datasets,
        "out": str(out),
        "__dataset_marker_dir": str(tmp_path / "markers"),
        "ansible_python_interpreter": sys.executable,
        # Small waits keep the test to seconds; the attempt budget still covers the cuts.
        "dataset_retry_max_delay": 1,
        "dataset_timeout_s": 5,
        "dataset_allowed_roots": [str(tmp_path)],
        **extra,
    }
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,",
         str(PLAYBOOK), "-e", json.dumps(variables), *args],
        capture_output=True, text=True, env=env, timeout=240, check=False,
    )  # fmt: skip
    kept = json.loads(out.read_text()) if out.exists() else {}
    return done.returncode, done.stdout + done.stderr, kept


def files_of(server: FlakyServer) -> list[dict[str, Any]]:
    return [{"url": server.url(), "sha256": sha256(server.content)}]


def verdicts(kept: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["check"]: check for check in kept["checks"]}


def edits_are_caught_and_repaired(
    tmp_path: Path, datasets: list[dict[str, Any]], shard: Path, content: bytes
) -> None:
    # A same-size edit passes the cheap check and fails the full one, naming the file.
    edited = bytearray(content)
    edited[12345] ^= 0xFF
    shard.write_bytes(bytes(edited))
    rc, _, kept = play(tmp_path, datasets, "--skip-tags", "stage")
    assert verdicts(kept)["dataset.corpus"]["passed"]
    rc, _, kept = play(tmp_path, datasets, "--skip-tags", "stage", full=True)
    failed = verdicts(kept)["dataset.corpus"]
    assert not failed["passed"]
    assert "shards/000.bin: sha256 differs" in failed["detail"], failed
    # A truncated file fails the cheap check too.
    shard.write_bytes(content[: 2 * MIB])
    rc, _, kept = play(tmp_path, datasets, "--skip-tags", "stage")
    failed = verdicts(kept)["dataset.corpus"]
    assert f"shards/000.bin: size {2 * MIB} != {len(content)}" in failed["detail"], failed

    # Staging again repairs it: the manifest no longer vouches for the short file.
    rc, output, kept = play(tmp_path, datasets)
    assert rc == 0, output[-3000:]
    assert shard.read_bytes() == content
    assert verdicts(kept)["dataset.corpus"]["passed"]


def test_stage_resume_idempotence_and_verify(
    tmp_path: Path, server: FlakyServer, content: bytes
) -> None:
    local = tmp_path / "controller" / "vocab.json"
    local.parent.mkdir()
    local.write_bytes(b'{"tokens": 50257}\n' * 1000)
    dest = tmp_path / "node" / "corpus"
    # The connection is reset at 1 MiB (after a pause, so Linux delivers the bytes before the RST)
    # and cut again (FIN) at 3 MiB: two resumes.
    server.faults.drops = [Drop(offset=1 * MIB, reset=True, stall=0.2), Drop(offset=3 * MIB)]
    datasets = [{
        "name": "corpus", "dest": str(dest),
        "files": [
            {"url": server.url(), "sha256": sha256(content), "size": len(content),
             "path": "shards/000.bin"},
            {"src": str(local), "sha256": sha256(local.read_bytes())},
        ],
    }]  # fmt: skip

    rc, output, kept = play(tmp_path, datasets)
    assert rc == 0, output[-3000:]
    assert (dest / "shards" / "000.bin").read_bytes() == content
    assert (dest / "vocab.json").read_bytes() == local.read_bytes()
    assert sorted(p.name for p in dest.rglob("*")) == [
        "000.bin",
        "dataset-manifest.json",
        "shards",
        "vocab.json",
    ]
    (staged,) = kept["staged"]["datasets"]
    assert (staged["resumes"], staged["restarts"]) == (2, 0), staged
    assert sorted(staged["fetched"]) == ["shards/000.bin", "vocab.json"]
    assert [start for start in server.range_starts() if start] == [1 * MIB, 3 * MIB]
    version = build_manifest(dest).version
    assert read_manifest(dest).version == version == staged["version"]
    marker = json.loads((tmp_path / "markers" / "dataset.json").read_text())
    size = len(content) + local.stat().st_size
    recorded = {"name": "corpus", "dest": str(dest), "version": version, "files": 2, "bytes": size}
    assert marker["datasets"] == [recorded]
    passed = verdicts(kept)["dataset.corpus"]
    assert passed["passed"]
    assert "2 files" in passed["detail"]
    assert "sizes checked" in passed["detail"]

    # A second run asks the server nothing, copies nothing and changes nothing.
    asked = len(server.requests)
    rc, output, kept = play(tmp_path, datasets)
    assert rc == 0, output[-3000:]
    assert len(server.requests) == asked
    assert kept["plan"]["copies"] == []
    assert not kept["plan"]["changed"]
    assert not kept["staged"]["changed"]
    assert kept["staged"]["datasets"][0]["fetched"] == []

    edits_are_caught_and_repaired(tmp_path, datasets, dest / "shards" / "000.bin", content)


def test_wrong_hashes_are_named_and_leave_nothing(
    tmp_path: Path, server: FlakyServer, content: bytes
) -> None:
    dest = tmp_path / "node" / "bad"
    wrong = hashlib.sha256(b"not the file").hexdigest()
    bad = [{"name": "bad", "dest": str(dest), "files": [{"url": server.url(), "sha256": wrong}]}]
    rc, output, _ = play(tmp_path, bad)
    assert rc != 0
    assert f"downloaded from {server.url()} has sha256 {sha256(content)}" in output, output[-3000:]
    assert wrong in output
    assert sorted(p.name for p in dest.iterdir()) == []

    local = tmp_path / "vocab.json"
    local.write_bytes(b"{}\n")
    asked = len(server.requests)
    rc, output, _ = play(tmp_path, [{"name": "bad", "dest": str(tmp_path / "node" / "other"),
                                     "files": [{"src": str(local), "sha256": wrong}]}])  # fmt: skip
    assert rc != 0
    assert f"{local} on the controller has sha256 {sha256(local.read_bytes())}" in output
    assert not (tmp_path / "node" / "other").exists()
    assert len(server.requests) == asked


def test_refusals_come_before_any_byte(tmp_path: Path, server: FlakyServer, content: bytes) -> None:
    with mounted_tmpfs(tmp_path / "small", "1m") as small:
        rc, output, _ = play(tmp_path, [{"name": "big", "dest": str(small / "big"),
                                         "files": [{"url": server.url(), "sha256": sha256(content),
                                                    "size": len(content)}]}])  # fmt: skip
        assert rc != 0
        assert f"data set 'big' needs 4.0 MiB ({len(content)} bytes) more in {small}" in output
        assert "free space there or choose another dest" in output
        assert server.requests == []
        assert list(small.iterdir()) == []

    # A dest outside dataset_allowed_roots (here the test's directory) fails the task at once.
    outside = [{"name": "typo", "dest": "/etc/nodeprep-dataset-test", "files": files_of(server)}]
    rc, output, _ = play(tmp_path, outside)
    assert rc != 0
    assert "dest /etc/nodeprep-dataset-test is outside the allowed roots" in output
    assert not Path("/etc/nodeprep-dataset-test").exists()

    crowded = tmp_path / "crowded"
    crowded.mkdir()
    (crowded / "notes.txt").write_text("mine")
    rc, output, _ = play(
        tmp_path, [{"name": "crowded", "dest": str(crowded), "files": files_of(server)}]
    )
    assert rc != 0
    assert "holds files the data set does not list (notes.txt)" in output
    assert server.requests == []
    assert sorted(p.name for p in crowded.iterdir()) == ["notes.txt"]
