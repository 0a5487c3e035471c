"""The progress probe and the hang response against real trainer processes.

The stand-in trainers (dummy_trainer.py) publish progress and dump their stacks as the
reference trainer does; a hang is a call that never returns (as a rank inside a collective
waits), or a SIGSTOP. Allowances here are a fraction of a second so that each case takes
seconds; the defaults and their derivation are tested on the pure function.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hb_support import RunningDaemon, wait_for
from prometheus_client.parser import text_string_to_metric_families

from nodeprep import contract
from nodeprep.heartbeat import config as config_mod
from nodeprep.heartbeat import metrics
from nodeprep.heartbeat.progress_probe import ProgressCheck, allowance
from nodeprep.heartbeat.state import State
from nodeprep.progress import Phase, Progress, ProgressWriter, progress_path, read_progress

TrainerStarter = Callable[..., tuple[subprocess.Popen[bytes], Path]]
STEP_S = 0.05


def progress_probe(**overrides: Any) -> dict[str, Any]:
    """Hung after 10 x 0.05 s without a step, at least 0.5 s; read every 0.1 s."""
    probe = {"name": "steps", "type": "progress", "interval": 0.1, "timeout": 0.1,
             "floor_s": 0.5, "startup_s": 5, "checkpoint_s": 5}  # fmt: skip
    return {**probe, **overrides}


def hang_actions(**overrides: Any) -> dict[str, Any]:
    return {"signal_trainers": False, "hang": {"dump_wait_s": 2, "grace_s": 1, **overrides}}


def reading(median: float, phase: Phase = Phase.TRAIN) -> Progress:
    return Progress(10, 0.0, 0.5, median, phase, 0, 0.0)


def test_the_allowance_is_ten_median_steps_within_floor_and_ceiling() -> None:
    cfg = config_mod.parse({"probes": [{"name": "p", "type": "progress"}]}).probes[0]
    assert (cfg.factor, cfg.floor_s, cfg.ceiling_s, cfg.fail_threshold) == (10, 30, 600, 1)
    assert allowance(cfg, reading(5.0)) == 50.0
    assert allowance(cfg, reading(0.01)) == 30.0  # the floor
    assert allowance(cfg, reading(0.0)) == 30.0  # no step timed yet
    assert allowance(cfg, reading(120.0)) == 600.0  # the ceiling
    assert allowance(cfg, reading(0.01, Phase.STARTUP)) == 600.0
    assert allowance(cfg, reading(0.01, Phase.CHECKPOINT)) == 300.0
    assert allowance(cfg, reading(45.0, Phase.CHECKPOINT)) == 450.0  # never below a step's


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"floor_s": 90, "ceiling_s": 60}, "probes[0].floor_s: 90 s exceeds ceiling_s 60 s"),
        ({"factor": 0}, "probes[0].factor: must be a positive number"),
        ({"startup_s": "long"}, "probes[0].startup_s: expected int or float"),
    ],
)
def test_bad_progress_settings_are_named(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(config_mod.ConfigError, match=message.replace("[", r"\[")):
        config_mod.parse({"probes": [{"name": "p", "type": "progress", **raw}]})


@pytest.mark.parametrize(
    ("hang", "message"),
    [
        ({"signals": ["SIGHUP"]}, "actions.hang.signals: must list signals among SIGINT"),
        ({"grace_s": -1}, "actions.hang.grace_s: must be a positive number"),
        ({"dump": True}, "actions.hang.dump: unknown key"),
    ],
)
def test_bad_hang_actions_are_named(hang: dict[str, Any], message: str) -> None:
    raw = {"probes": [{"name": "p", "type": "progress"}], "actions": {"hang": hang}}
    with pytest.raises(config_mod.ConfigError, match=message):
        config_mod.parse(raw)


def test_a_hung_trainer_dumps_its_stacks_and_is_killed_after_sigterm_and_grace(
    run_daemon: Callable[..., RunningDaemon], start_trainer: TrainerStarter
) -> None:
    # It blocks forever after step 30; its SIGTERM handler only sets a flag it never reads.
    proc, run_dir = start_trainer("hung", "--progress", "--hang-after", "30")
    hb = run_daemon({"probes": [progress_probe()], "actions": hang_actions()})
    declared = wait_for(lambda: hb.daemon.actions.ledger.total.get("hang"), 15, "a hang")
    assert declared == 1
    state = hb.daemon.states["steps"]
    assert state.last is not None
    assert f"trainer pid {proc.pid} (rank 0, {run_dir}): no step for" in state.last.evidence
    assert "after step 30" in state.last.evidence
    dump = contract.stack_dump_path(run_dir, 0, proc.pid)
    wait_for(lambda: dump.exists() and "dummy_trainer.py" in dump.read_text(), 5, "the dump")
    assert "in main" in dump.read_text()  # the frame the rank is stuck in
    assert proc.wait(timeout=10) == -signal.SIGKILL  # SIGTERM could not end it; SIGKILL did
    ledger = hb.daemon.actions.ledger
    # The daemon records the SIGKILL once its send returns: the rank can be gone before that.
    wait_for(lambda: ledger.total.get("hang_sigkill") == 1, 5, "the SIGKILL to be recorded")
    assert (ledger.total["stack_dump"], ledger.total["hang_sigterm"]) == (1, 1)
    assert ledger.total["hang_sigkill"] == 1
    assert ledger.trainer_hangs == {(str(run_dir), 0): 1}
    assert ledger.trainer_last_dump[(str(run_dir), 0)] >= ledger.last_time["hang"]


def test_a_stopped_rank_is_declared_hung_and_dumps_once_sigcont_lets_it_run(
    run_daemon: Callable[..., RunningDaemon], start_trainer: TrainerStarter
) -> None:
    proc, run_dir = start_trainer("stopped", "--progress")
    hb = run_daemon({"probes": [progress_probe()], "actions": hang_actions()})
    wait_for(lambda: _steps(hb) >= 5, 10, "5 steps (start-up over)")
    os.kill(proc.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    wait_for(lambda: hb.daemon.actions.ledger.total.get("hang"), 15, "a hang")
    detected_s = time.monotonic() - stopped_at
    assert detected_s < 2.0, detected_s  # the floor 0.5 s, one 0.1 s interval, slack for load
    # SIGTERM, then SIGCONT: it runs again, writes the dump it was asked for, then exits.
    assert proc.wait(timeout=10) == 0
    dump = contract.stack_dump_path(run_dir, 0, proc.pid)
    assert "dummy_trainer.py" in dump.read_text()
    assert hb.daemon.actions.ledger.total.get("hang_sigkill") is None


def test_a_slow_but_steady_trainer_never_trips(
    run_daemon: Callable[..., RunningDaemon], start_trainer: TrainerStarter
) -> None:
    # Steps of 0.1 s, from step 10 on 5 x as long: each is within 10 x the median so far (the
    # floor, 0.3 s, is below the slow steps, so the median decides). Reads get 0.5 s: one that
    # a loaded machine answers late is a failed check, and this test counts every one.
    start_trainer("slow", "--progress", "--step-s", "0.1", "--slow-after", "10",
                  "--slow-step-s", "0.5")  # fmt: skip
    hb = run_daemon({
        "probes": [progress_probe(floor_s=0.3, interval=0.5, timeout=0.5)],
        "actions": hang_actions(),
    })  # fmt: skip
    wait_for(lambda: _steps(hb) >= 20, 30, "20 steps")
    assert hb.daemon.actions.ledger.total.get("hang") is None
    assert [seen for seen in hb.observed if not seen[2]] == []


def test_a_paused_trainer_is_not_judged_and_escalation_can_be_left_out(
    run_daemon: Callable[..., RunningDaemon], start_trainer: TrainerStarter, tmp_path: Path
) -> None:
    proc, _ = start_trainer("paused", "--progress")
    registry = tmp_path / "run" / "trainers"
    cfg = config_mod.parse({"probes": [progress_probe()]}).probes[0]
    record = progress_path(proc.pid, registry)
    wait_for(lambda: (read_progress(record) or reading(0)).step >= 5, 10, "5 steps")
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        time.sleep(1.0)
        paused = ProgressCheck(cfg, registry, paused=lambda: {proc.pid}).attempt()
        judged = ProgressCheck(cfg, registry).attempt()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert paused.ok, paused.evidence
    assert not judged.ok
    assert "no step for" in judged.evidence
    # Stacks only: the hung trainer is left running for a person to look at.
    hung, run_dir = start_trainer("dump-only", "--progress", "--hang-after", "10")
    hb = run_daemon({"probes": [progress_probe()], "actions": hang_actions(signals=[])})
    dump = contract.stack_dump_path(run_dir, 0, hung.pid)
    wait_for(lambda: dump.exists() and "dummy_trainer.py" in dump.read_text(), 15, "the dump")
    time.sleep(1.5)  # longer than grace_s
    assert hung.poll() is None
    assert "hang_sigterm" not in hb.daemon.actions.ledger.total


def test_a_record_whose_process_is_not_the_trainer_is_never_signalled(
    start_trainer: TrainerStarter, tmp_path: Path
) -> None:
    """The registration names a live pid with another start time: a pid reused."""
    proc, _ = start_trainer("real", "--progress")
    registry = tmp_path / "run" / "trainers"
    record = registry / f"{proc.pid}.json"
    entry = contract.Registration.from_json(record.read_text())
    ticks = (entry.start_ticks or 0) + 1
    forged = contract.Registration(entry.pid, entry.run_dir, entry.started_at, ticks, entry.boot_id)
    record.write_text(forged.to_json())
    cfg = config_mod.parse({"probes": [progress_probe()]}).probes[0]
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        time.sleep(1.0)
        outcome = ProgressCheck(cfg, registry).attempt()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert outcome.ok, outcome.evidence  # not a confirmed trainer: not judged, not signalled
    assert proc.poll() is None


def test_trainer_metrics_are_named_and_typed_for_node_exporter(
    run_daemon: Callable[..., RunningDaemon], start_trainer: TrainerStarter, tmp_path: Path
) -> None:
    _, run_dir = start_trainer("metrics", "--progress", "--hang-after", "25")
    hb = run_daemon({"probes": [progress_probe()], "actions": hang_actions(signals=[])})
    wait_for(lambda: hb.daemon.actions.ledger.total.get("stack_dump"), 15, "a stack dump")
    text = metrics.render(hb.daemon.snapshot())
    kinds = {family.name: family.type for family in text_string_to_metric_families(text)}
    prefix = "nodeprep_heartbeat_trainer_"
    assert kinds[f"{prefix}hangs"] == "counter"
    for gauge in ("step", "steps_per_second", "seconds_since_step", "loss",
                  "last_stack_dump_timestamp_seconds"):  # fmt: skip
        assert kinds[f"{prefix}{gauge}"] == "gauge", gauge
    labels = f'{{rank="0",run_dir="{run_dir}"}}'
    assert f"{prefix}hangs_total{labels} 1.0" in text
    assert f"{prefix}step{labels} 25.0" in text


def _steps(hb: RunningDaemon) -> int:
    readings = hb.daemon.progress_checks[0].readings
    return max((r.step for r in readings.values()), default=0)


def test_a_nan_or_spiking_loss_is_a_warning_metric_not_a_trip(tmp_path: Path) -> None:
    """This test process registers itself as the trainer and publishes its own losses."""
    registry = tmp_path / "trainers"
    contract.register(tmp_path / "run", time.time(), registry)
    writer = ProgressWriter(progress_path(os.getpid(), registry), rank=0)
    try:
        cfg = config_mod.parse({"probes": [progress_probe()]}).probes[0]
        check = ProgressCheck(cfg, registry)

        def read(step: int, loss: float) -> str | None:
            writer.step(step, loss)
            outcome = check.attempt()
            assert outcome.ok, outcome.evidence
            return next(iter(check.readings.values())).loss_anomaly

        assert [read(step, 1.0 + step / 100) for step in range(1, 6)] == [None] * 5
        assert read(6, 10.0) is None  # 9.5 x the median: not yet a spike
        assert read(7, 11.0) == "spike"
        assert read(8, float("nan")) == "nonfinite"
        assert read(9, 1.0) is None
        text = metrics.render(metrics.Snapshot([], State.HEALTHY, trainers=check.readings))
        assert 'kind="nonfinite"' in text
    finally:
        writer.close()
        contract.unregister(registry)


def test_every_rank_of_a_hung_job_is_dumped_and_ended_and_other_jobs_are_left_alone(
    run_daemon: Callable[..., RunningDaemon], start_trainer: TrainerStarter, tmp_path: Path
) -> None:
    """Two ranks share a run directory; one is stopped, the other still steps (as a rank does
    until the collective that waits for its peer): both are the hung job's."""
    stopped, run_dir = start_trainer("job", "--progress")
    (run_dir / "ready").unlink()
    peer, _ = start_trainer("job", "--progress")
    other, _ = start_trainer("other-job", "--progress")
    hb = run_daemon({"probes": [progress_probe()], "actions": hang_actions()})
    wait_for(lambda: _steps(hb) >= 5, 10, "5 steps")
    os.kill(stopped.pid, signal.SIGSTOP)
    wait_for(lambda: hb.daemon.actions.ledger.total.get("hang"), 15, "a hang")
    for proc in (stopped, peer):
        assert proc.wait(timeout=10) == 0  # SIGTERM (and SIGCONT): each leaves its loop
        assert "dummy_trainer.py" in contract.stack_dump_path(run_dir, 0, proc.pid).read_text()
    assert other.poll() is None  # another run directory: another job, untouched
