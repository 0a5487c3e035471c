# FAKE: stands in for pynvml at the NVML boundary, because no NVIDIA GPU or driver exists here.
"""Only the pynvml calls nodeprep's NVML reading makes, with settable readings.

One stand-in for both users of plugins/module_utils/nvml.py: the heartbeat's GPU probe
(nodeprep.heartbeat.gpu) and verify's nodeprep_gpu module.

The real module is exercised too: on a machine without a driver, real pynvml must make the
GPU check report "skipped: no NVIDIA driver" (see test_hb_gpu.py), and on a device
machine the same check reads the real GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace


class NVMLError(Exception):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_Timeout(NVMLError):
    pass


@dataclass
class FakeGpu:
    temperature_c: int = 50
    memory_used: int = 10
    memory_total: int = 100
    utilization_pct: int = 90
    ecc_uncorrected: int | None = 0
    xids: list[int] = field(default_factory=list)


class FakeNvml:
    """Use as ``Daemon(config, nvml=FakeNvml([FakeGpu()]))``."""

    NVMLError = NVMLError
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, gpus: list[FakeGpu], driver: bool = True) -> None:
        self.gpus = gpus
        self.driver = driver
        self.inits = 0
        self.shut = False

    def nvmlInit(self) -> None:
        if not self.driver:
            raise NVMLError_DriverNotLoaded("Driver Not Loaded")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.86.15"

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        return handle

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        """Older bindings return bytes, as this does; nvml.text() reads both."""
        return f"GPU-0000000{handle}-fake-4e50-8000-00000000000{handle}".encode()

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return self.gpus[handle].temperature_c

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        gpu = self.gpus[handle]
        return SimpleNamespace(used=gpu.memory_used, total=gpu.memory_total)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=self.gpus[handle].utilization_pct, memory=0)

    def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int:
        value = self.gpus[handle].ecc_uncorrected
        if value is None:
            raise NVMLError_NotSupported("Not Supported")
        return value

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: int, mask: int, event_set: str) -> None:
        return None

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        for index, gpu in enumerate(self.gpus):
            if gpu.xids:
                return SimpleNamespace(device=index, eventData=gpu.xids.pop(0))
        raise NVMLError_Timeout("Timeout")
