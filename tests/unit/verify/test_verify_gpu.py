"""The GPU check's decisions, read through a fake NVML (no GPU here) and real pynvml (no driver)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from collection_plugins import load
from fake_nvml import FakeGpu, FakeNvml

gpu = load("nodeprep_gpu")
LIMITS: dict[str, Any] = {
    "expected_count": 0,
    "max_temp_c": 85.0,
    "max_ecc_uncorrected": 0,
    "critical_xids": [48, 79],
}


def fake(temps: list[float], ecc: list[int | None], driver: bool = True) -> FakeNvml:
    gpus = [
        FakeGpu(temperature_c=int(t), ecc_uncorrected=e) for t, e in zip(temps, ecc, strict=True)
    ]
    return FakeNvml(gpus, driver=driver)


def verdicts(nv: Any, log: str | None = "", limits: dict[str, Any] | None = None) -> Any:
    found = gpu.evaluate(gpu.read_gpus(nv), log, "dmesg refused", limits or LIMITS)
    return {c["check"]: c for c in found}


def test_healthy_gpus_pass() -> None:
    found = verdicts(fake(temps=[40, 55], ecc=[0, 0]))
    assert {k: (v["passed"], v["skip"]) for k, v in found.items()} == {
        "gpu.driver": (True, ""),
        "gpu.count": (True, ""),
        "gpu.temperature": (True, ""),
        "gpu.ecc": (True, ""),
        "gpu.xid": (True, ""),
    }
    assert found["gpu.count"]["detail"].startswith("2 GPU(s) (NVIDIA H100")
    assert found["gpu.temperature"]["detail"] == "hottest 55 C <= 85 C"


def test_thresholds_fail_with_detail() -> None:
    log = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
    found = verdicts(fake(temps=[40, 91], ecc=[0, 3]), log, {**LIMITS, "expected_count": 4})
    assert not found["gpu.count"]["passed"]
    assert "gpu1 91 C above 85 C" in found["gpu.temperature"]["detail"]
    assert "gpu1 3 > 0" in found["gpu.ecc"]["detail"]
    assert "XID 79 on PCI:0000:3b:00" in found["gpu.xid"]["detail"]


def test_non_critical_xid_passes_and_unreadable_log_skips() -> None:
    found = verdicts(fake(temps=[40], ecc=[0]), "NVRM: Xid (PCI:0000:3b:00): 13, Graphics\n")
    assert found["gpu.xid"]["passed"]
    assert "1 XID line(s)" in found["gpu.xid"]["detail"]
    assert verdicts(fake(temps=[40], ecc=[0]), None)["gpu.xid"]["skip"] == "dmesg refused"


def test_ecc_unsupported_skips_with_reason() -> None:
    found = verdicts(fake(temps=[40], ecc=[None]))
    assert found["gpu.ecc"]["skip"] == "ECC is off or not supported on these GPUs"


def test_verify_and_the_heartbeat_read_gpus_with_one_implementation() -> None:
    from nodeprep.heartbeat import gpu as heartbeat_gpu
    from nodeprep.heartbeat import nvml

    ours = Path(inspect.getfile(gpu.nvml)).resolve()
    assert ours == Path(inspect.getfile(nvml)).resolve()
    assert heartbeat_gpu.nvml is nvml
    assert gpu.nvml.FATAL_XIDS == heartbeat_gpu.FATAL_XIDS


def test_no_driver_skips_every_gpu_check_with_the_reason() -> None:
    found = verdicts(fake(temps=[], ecc=[], driver=False))
    assert all(v["skip"] for v in found.values())
    assert "no NVIDIA driver" in found["gpu.driver"]["skip"]


def test_real_pynvml_without_driver_skips() -> None:
    pynvml = pytest.importorskip("pynvml")
    reading = gpu.read_gpus(pynvml)
    if "gpus" in reading:
        pytest.skip("this machine has an NVIDIA driver; the device check covers it")
    found = {c["check"]: c for c in gpu.evaluate(reading, None, None, LIMITS)}
    assert found["gpu.driver"]["skip"].startswith("no NVIDIA driver")


def sysfs(root: Path, devices: dict[str, tuple[str, str]], nodes: tuple[str, ...] = ()) -> Path:
    """A stand-in root with /sys/bus/pci/devices/<addr>/{vendor,class} and /dev nodes."""
    for address, (vendor, klass) in devices.items():
        device = root / "sys/bus/pci/devices" / address
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(klass + "\n")
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for node in nodes:
        (root / "dev" / node).touch()
    return root


def test_nvidia_gpus_are_found_by_pci_vendor_and_device_nodes(tmp_path: Path) -> None:
    root = sysfs(
        tmp_path,
        {
            "0000:3b:00.0": ("0x10de", "0x030200"),  # an H100: 3D controller
            "0000:3b:00.1": ("0x10de", "0x040300"),  # a GPU's audio function: not a GPU
            "0000:00:02.0": ("0x8086", "0x030000"),  # another vendor's display
        },
        nodes=("nvidia0", "nvidiactl", "nvidia-uvm"),
    )
    assert gpu.nvml.nvidia_devices(str(root)) == ["PCI 0000:3b:00.0", "nvidia0"]
    assert gpu.nvml.nvidia_devices(str(sysfs(tmp_path / "none", {}))) == []


def test_no_nvml_and_no_nvidia_device_skips_as_no_gpu() -> None:
    reading = gpu.account_for_devices({"missing": "nvidia-ml-py not installed on this node"}, [])
    found = {c["check"]: c for c in gpu.evaluate(reading, None, None, LIMITS)}
    assert found["gpu.driver"]["skip"] == "no NVIDIA GPU on this node"
    assert all(c["skip"] for c in found.values())


def test_nvidia_devices_without_nvml_fail_naming_what_is_missing() -> None:
    missing = {"missing": "nvidia-ml-py not installed on this node"}
    reading = gpu.account_for_devices(missing, ["PCI 0000:3b:00.0", "nvidia0"])
    found = {c["check"]: c for c in gpu.evaluate(reading, None, None, LIMITS)}
    driver = found["gpu.driver"]
    assert not driver["passed"]
    assert driver["skip"] == ""
    assert driver["detail"].startswith(
        "this node has NVIDIA GPU(s) (PCI 0000:3b:00.0, nvidia0) but NVML cannot read them: "
        "nvidia-ml-py not installed on this node; install the NVIDIA driver and nvidia-ml-py"
    )
    # With NVML readable the devices change nothing.
    healthy = gpu.read_gpus(fake(temps=[40], ecc=[0]))
    assert gpu.account_for_devices(healthy, ["nvidia0"]) == healthy
