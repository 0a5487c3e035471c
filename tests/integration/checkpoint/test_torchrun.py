"""Two-process torchrun (gloo, loopback only), bit-exact per rank against one uninterrupted run:
the whole job killed and resumed; one rank stopped, found hung by the watchdog, escalated,
restarted by torchrun and resumed."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeprep import contract
from nodeprep.progress import progress_path, read_progress
from ports import reserved_port
from proctree import descendants

from .trainer_proc import SMALL, assert_bit_exact, load_state, trainer_env, wait_for_count

STEPS, SEED = 120, 21


def _torchrun(
    run_dir: Path, out: Path, env: dict[str, str], log: Path, *options: str
) -> subprocess.Popen[bytes]:
    torchrun = Path(sys.executable).with_name("torchrun")
    args = [
        str(torchrun),
        *options,
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{reserved_port()}",
        "-m",
        "nodeprep.trainer",
        "--run-dir",
        str(run_dir),
        "--steps",
        str(STEPS),
        "--seed",
        str(SEED),
        "--checkpoint-every",
        "4",
        "--full-every",
        "8",
        "--device",
        "cpu",
        "--final-state-out",
        str(out),
        *SMALL,
    ]
    with open(log, "ab") as handle:
        return subprocess.Popen(args, env=env, stdout=handle, stderr=subprocess.STDOUT)


def _kill_job(*procs: subprocess.Popen[bytes]) -> None:
    """SIGKILL each torchrun and every process under it at once (its ranks get sessions of
    their own), all of them before waiting for any."""
    for pid in [pid for proc in procs for pid in (proc.pid, *descendants(proc.pid))]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for proc in procs:
        proc.wait(timeout=60)


def _env(registry: Path) -> dict[str, str]:
    env = trainer_env(registry)
    env.update(GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")
    return env


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted job's final states (ref.pt, ref.pt.rank1), shared by the stories."""
    where = tmp_path_factory.mktemp("reference")
    env = _env(where / "registry")
    proc = _torchrun(where / "run", where / "ref.pt", env, where / "ref.log")
    assert proc.wait(timeout=300) == 0, (where / "ref.log").read_text()[-3000:]
    return where / "ref.pt"


def _assert_bit_exact_per_rank(reference: Path, out: Path) -> None:
    for suffix in ("", ".rank1"):
        expected = load_state(reference.with_name(reference.name + suffix))
        assert_bit_exact(expected, load_state(out.with_name(out.name + suffix)), f"rank{suffix}")


@pytest.mark.timeout(600)
def test_torchrun_two_ranks_killed_and_resumed_bit_exact(tmp_path: Path, reference: Path) -> None:
    env = _env(tmp_path / "registry")
    rand = random.Random(7)

    run_dir, out, log = tmp_path / "run", tmp_path / "out.pt", tmp_path / "run.log"
    for _ in range(2):
        commits = log.read_text().count("committed") if log.exists() else 0
        proc = _torchrun(run_dir, out, env, log)
        try:
            # Let each attempt commit something new, then kill at a random instant after.
            wait_for_count(log, r"committed", commits + 2, proc, timeout=180)
            time.sleep(rand.uniform(0.0, 0.3))
        finally:
            _kill_job(proc)
    final = _torchrun(run_dir, out, env, log)
    assert final.wait(timeout=300) == 0, log.read_text()[-3000:]

    text = log.read_text()
    assert text.count("resumed=True") >= 2, text[-3000:]
    _assert_bit_exact_per_rank(reference, out)
    rank0, rank1 = (load_state(tmp_path / name)["rng"] for name in ("out.pt", "out.pt.rank1"))
    assert not rank0["torch_cpu"].equal(rank1["torch_cpu"]), "each rank keeps its own RNG"


@pytest.fixture
def watchdog(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """The heartbeat daemon as a process, watching the registry with a progress probe only.

    The allowance is 3 s (the steps take a few tens of milliseconds, so the floor decides),
    also during a save (the stop may land in one), read every 0.5 s; the start-up allowance
    covers torch's import on a loaded machine. Escalation: SIGTERM, then SIGKILL after 20 s.
    """
    config = {
        "probes": [{"name": "steps", "type": "progress", "interval": 0.5, "timeout": 0.5,
                    "floor_s": 3, "startup_s": 120, "checkpoint_s": 3}],
        "actions": {"signal_trainers": False,
                    "hang": {"dump_wait_s": 3, "grace_s": 20}},
        "registry_dir": str(tmp_path / "registry" / "trainers"),
        "metrics": {"path": str(tmp_path / "heartbeat.prom"), "interval_s": 0.5},
    }  # fmt: skip
    path = tmp_path / "heartbeat.json"
    path.write_text(json.dumps(config))
    log = tmp_path / "heartbeat.log"
    with open(log, "ab") as handle:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nodeprep.heartbeat", "--config", str(path)],
            stdout=handle, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield proc, log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _ranks(registry: Path) -> dict[int, int]:
    """rank -> pid of the trainers that publish progress now."""
    ranks = {}
    for record in registry.glob("*.json"):
        pid = int(record.stem)
        with contextlib.suppress(ValueError, OSError):
            progress = read_progress(progress_path(pid, registry))
            if progress is not None and progress.step >= 20:
                ranks[progress.rank] = pid
    return ranks


@pytest.mark.timeout(600)
def test_a_stopped_rank_is_found_hung_dumped_escalated_and_the_job_resumes_bit_exact(
    tmp_path: Path, reference: Path, watchdog: tuple[subprocess.Popen[bytes], Path]
) -> None:
    """SIGSTOP one rank: the other waits in the collective, neither steps. The watchdog
    declares both hung, has both dump their stacks (the stopped one once SIGCONT lets it run),
    sends SIGTERM: both reach the step boundary, save an emergency checkpoint and exit 143.
    The job is started again, as its supervisor would, and resumes bit-exact.

    torchrun's own restart (--max-restarts 1) failed here once in CI: the restarted group's
    gloo connectFullMesh was refused on both ranks within 3 s of the restart. So the relaunch
    is the test's, the same for every run."""
    daemon, daemon_log = watchdog
    registry = tmp_path / "registry" / "trainers"
    run_dir, out, log = tmp_path / "run", tmp_path / "out.pt", tmp_path / "run.log"
    env = _env(tmp_path / "registry")
    proc = _torchrun(run_dir, out, env, log)
    try:
        deadline = time.monotonic() + 240
        while len(ranks := _ranks(registry)) < 2:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "both ranks never reached step 20"
            time.sleep(0.1)
        os.kill(ranks[1], signal.SIGSTOP)
        stopped = time.monotonic()
        while "action=hang " not in daemon_log.read_text():
            assert daemon.poll() is None, daemon_log.read_text()
            assert time.monotonic() - stopped < 60, daemon_log.read_text()[-3000:]
            time.sleep(0.05)
        detected_s = time.monotonic() - stopped
        assert proc.wait(timeout=120) != 0
        assert re.search(r"exitcode\s*: 143", log.read_text()), log.read_text()[-3000:]
        proc = _torchrun(run_dir, out, env, log)
        assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            _kill_job(proc)
    print(f"hang declared {detected_s:.1f} s after SIGSTOP (allowance 3 s, read every 0.5 s)")
    assert detected_s < 3 + 0.5 + 3, detected_s  # allowance, one interval, slack for load
    for rank, pid in ranks.items():
        stacks = contract.stack_dump_path(run_dir, rank, pid).read_text()
        assert "nodeprep/trainer/loop.py" in stacks, (rank, stacks)
    said = daemon_log.read_text()
    assert len(re.findall(r"action=hang_sigterm pid=", said)) == 2, said
    assert "action=hang_sigkill" not in said, said  # SIGTERM was enough: both saved, exited
    assert re.search(rf"action=stack_dump pid={ranks[0]} rank=0 file=\S+ result=written", said)
    assert re.search(rf"action=stack_dump pid={ranks[1]} rank=1 file=\S+ result=late", said)
    text = log.read_text()
    assert re.search(r"emergency checkpoint step=\d+ signal=SIGTERM", text), text[-3000:]
    assert text.count("resumed=True") == 1, text[-3000:]
    _assert_bit_exact_per_rank(reference, out)


def _node_agents(
    tmp_path: Path, out: Path, env: dict[str, str], log: Path
) -> list[subprocess.Popen[bytes]]:
    """Two torchrun agents on this machine as two nodes of one job (one rank each), each
    with its own run directory: no filesystem is shared between the "nodes"."""
    torchrun, endpoint = Path(sys.executable).with_name("torchrun"), f"127.0.0.1:{reserved_port()}"
    agents = []
    for node in (0, 1):
        args = [
            str(torchrun), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", endpoint, "--rdzv-id", "two-nodes", "--local-addr", "127.0.0.1",
            "-m", "nodeprep.trainer", "--run-dir", str(tmp_path / f"node{node}"),
            "--steps", str(STEPS), "--seed", str(SEED), "--checkpoint-every", "4",
            "--full-every", "8", "--device", "cpu", "--final-state-out", str(out),
            "--checkpoint-copies", "node", *SMALL,
        ]  # fmt: skip
        with open(log.with_name(f"{log.name}.node{node}"), "ab") as handle:
            agents.append(subprocess.Popen(args, env=env, stdout=handle, stderr=subprocess.STDOUT))
    return agents


def _fulls(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "checkpoints").glob("ckpt-*-full"))


@pytest.mark.timeout(600)
def test_two_nodes_without_a_shared_filesystem_resume_from_a_checkpoint_both_verify(
    tmp_path: Path, reference: Path
) -> None:
    """--checkpoint-copies node: each node's local rank 0 keeps its own copy. The job is
    killed; node1 loses the newest checkpoint both nodes had; the restarted job resumes on
    both nodes from the newest checkpoint both still have, each from its own disk, bit-exact.
    Each node's log says so: its start line, its steps and the job's one state digest."""
    env = _env(tmp_path / "registry")
    out, log = tmp_path / "out.pt", tmp_path / "run.log"
    agents = _node_agents(tmp_path, out, env, log)
    try:
        deadline = time.monotonic() + 240
        while min(len(_fulls(tmp_path / f"node{n}")) for n in (0, 1)) < 3:
            assert all(a.poll() is None for a in agents), log.with_name("run.log.node0").read_text()
            assert time.monotonic() < deadline, "both nodes never kept three full checkpoints"
            time.sleep(0.05)
    finally:
        _kill_job(*agents)
    node0, node1 = (_fulls(tmp_path / f"node{n}") for n in (0, 1))
    # Written on both: each node commits on its own writer, so one may be a save ahead.
    both = {p.name for p in node0} & {p.name for p in node1}
    assert len(both) >= 2, (node0, node1)
    lost = tmp_path / "node1" / "checkpoints" / max(both)
    shutil.rmtree(lost)  # node1 lost the newest save both had (its disk, or it died first)
    common = max(set(p.name for p in node0) & set(p.name for p in _fulls(tmp_path / "node1")))
    agents = _node_agents(tmp_path, out, env, log)
    for node, agent in enumerate(agents):
        assert agent.wait(timeout=300) == 0, log.with_name(f"run.log.node{node}").read_text()
    said = {}
    for node in (0, 1):  # each node's local rank 0 logs: the second node's log tells the same
        text = log.with_name(f"run.log.node{node}").read_text()
        resumed = re.findall(r"^start step=(\d+) resumed=True", text, re.M)
        assert resumed == [str(int(common.split("-")[1]))], (node, resumed, common, lost.name)
        steps = [int(s) for s in re.findall(r"^step (\d+) loss=", text, re.M)]
        assert steps[-1:] == [STEPS], (node, steps[-5:])
        said[node] = re.findall(r"^done step=(\d+) state_sha256=(\w+)$", text, re.M)
    assert len(said[0]) == 1, said
    assert said[0] == said[1], said
    _assert_bit_exact_per_rank(reference, out)
