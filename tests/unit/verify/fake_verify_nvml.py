# FAKE: stands in for pynvml at the NVML boundary, because no NVIDIA GPU or driver exists here.
"""Only the pynvml calls the verify GPU module makes, with settable readings."""

from __future__ import annotations

from typing import Any

NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class FakeNvml:
    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC

    def __init__(self, temps: list[float], ecc: list[int | None], no_driver: bool = False):
        self.temps, self.ecc, self.no_driver = temps, ecc, no_driver
        self.shut = False

    def nvmlInit(self) -> None:
        if self.no_driver:
            raise NVMLError_LibraryNotFound("libnvidia-ml.so.1 not found")

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.86.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.temps)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> float:
        return self.temps[handle]

    def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> Any:
        if self.ecc[handle] is None:
            raise NVMLError_NotSupported("ECC not supported")
        return self.ecc[handle]
