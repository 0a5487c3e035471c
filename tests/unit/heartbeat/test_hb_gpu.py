"""GPU health: thresholds and hysteresis through the NVML boundary; skips name the reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hb_support import RunningDaemon, wait_for

from fake_nvml import FakeGpu, FakeNvml
from nodeprep.heartbeat import metrics
from nodeprep.heartbeat.config import ProbeConfig, parse
from nodeprep.heartbeat.daemon import Daemon
from nodeprep.heartbeat.gpu import GpuCheck, load_nvml

CFG = ProbeConfig(
    "gpu",
    "gpu",
    1.0,
    0.5,
    3,
    2,
    max_temp_c=85,
    max_memory_ratio=0.95,
    min_utilization_ratio=0.1,
    max_ecc_uncorrected=0,
)


def test_readings_within_limits_then_each_threshold() -> None:
    gpus = [FakeGpu(), FakeGpu()]
    check = GpuCheck(CFG, FakeNvml(gpus))
    out = check.attempt()
    assert (out.ok, out.evidence) == (True, "2 GPU(s) within limits")
    assert check.readings["1"]["temperature_celsius"] == 50
    assert check.readings["0"]["memory_used_ratio"] == 0.1
    gpus[1].temperature_c = 91
    gpus[0].memory_used = 99
    gpus[0].utilization_pct = 0
    gpus[1].ecc_uncorrected = 2
    out = check.attempt()
    assert not out.ok
    assert not out.notice
    assert out.evidence == (
        "gpu0 memory 0.990 used > 0.95; gpu0 utilisation 0.00 < 0.1; "
        "gpu1 temperature 91 C > 85 C; gpu1 2 uncorrected ECC errors > 0"
    )


def test_xid_events_fatal_ones_are_notices_and_no_ecc_support_is_fine() -> None:
    gpus = [FakeGpu(ecc_uncorrected=None, xids=[13])]
    check = GpuCheck(CFG, FakeNvml(gpus))
    out = check.attempt()
    assert (out.ok, out.notice, out.evidence) == (False, False, "gpu0 XID 13")
    assert "ecc_uncorrected_errors" not in check.readings["0"]
    assert check.attempt().ok
    gpus[0].xids.append(79)
    out = check.attempt()
    assert (out.ok, out.notice, out.evidence) == (False, True, "gpu0 XID 79")
    assert check.readings["0"]["xid_events_total"] == 2


def test_no_driver_no_library_no_gpu_are_skips() -> None:
    for nvml, reason in [
        (FakeNvml([FakeGpu()], driver=False), "no NVIDIA driver"),
        (FakeNvml([]), "no NVIDIA GPU"),
    ]:
        out = GpuCheck(CFG, nvml).attempt()
        assert (out.ok, out.skipped, out.evidence) == (True, True, f"skipped: {reason}")
    out = GpuCheck(CFG, None, "nvidia-ml-py not installed").attempt()
    assert out.evidence == "skipped: nvidia-ml-py not installed"


def test_real_pynvml_here_reports_its_state() -> None:
    """On this machine there is no driver: real pynvml must give a skip, never a failure."""
    module, missing = load_nvml()
    out = GpuCheck(CFG, module, missing).attempt()
    if Path("/proc/driver/nvidia/version").exists():
        assert (out.ok, out.skipped) == (True, False), out.evidence
    else:
        assert (out.ok, out.skipped) == (True, True)
        assert out.evidence in ("skipped: no NVIDIA driver", "skipped: nvidia-ml-py not installed")


def test_gpu_overheat_trips_with_hysteresis_and_is_exported(
    run_daemon: Callable[..., RunningDaemon], tmp_path: Path
) -> None:
    gpus = [FakeGpu()]
    prom = tmp_path / "m.prom"
    hb = run_daemon(
        {
            "probes": [
                {
                    "name": "gpu",
                    "type": "gpu",
                    "interval": 0.2,
                    "timeout": 0.2,  # a fake board; a busy machine only makes it late
                    "fail_threshold": 3,
                    "recover_threshold": 2,
                }
            ],
            "metrics": {"path": str(prom), "interval_s": 0.2},
        },
        nvml=FakeNvml(gpus),
    )
    wait_for(
        lambda: prom.exists() and "gpu_temperature_celsius" in prom.read_text(), 5, "GPU metrics"
    )
    # Labelled by index and by the UUID NVML reported for that board.
    assert 'gpu="0",uuid="GPU-00000000-fake-4e50-8000-000000000000"' in prom.read_text()
    gpus[0].temperature_c = 95
    wait_for(lambda: hb.trips, 5, "an overheat trip")
    assert hb.trips[0][2] == "gpu0 temperature 95 C > 85 C"
    # The trip fires inside the third observation, which is recorded just after it returns.
    wait_for(lambda: sum(1 for _, _, ok, _ in hb.observed if not ok) >= 3, 5, "3 observations")
    states = [s for _, _, ok, s in hb.observed if not ok]
    assert states[:3] == ["suspect", "suspect", "failed"]


def test_skipped_gpu_is_exported_with_reason(tmp_path: Path) -> None:
    cfg = parse({"probes": [{"name": "gpu", "type": "gpu"}]})
    daemon = Daemon(cfg, nvml=FakeNvml([FakeGpu()], driver=False))
    daemon._observe(cfg.probes[0], daemon.gpu_checks[0].attempt())
    text = metrics.render(daemon.snapshot())
    assert 'nodeprep_heartbeat_gpu_check_skipped{reason="no NVIDIA driver"} 1' in text
    assert 'nodeprep_heartbeat_probe_state{probe="gpu",state="skipped"} 1' in text
