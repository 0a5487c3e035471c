"""Reading NVIDIA GPUs through NVML: the one implementation behind the heartbeat and verify.

``nodeprep.heartbeat.nvml`` is a symlink to this file (the watchdog's GPU probe), and the
collection's ``nodeprep_gpu`` module imports it as module_utils (verify's GPU checks), so
the two read the same counters the same way and agree on what "no driver" means.

The NVML module is passed in (the boundary): callers pass ``pynvml`` when it can be
imported, tests pass a stand-in with the same few calls. Standard library and Python 3.8
only, for the module_utils use.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Any

# XIDs after which a GPU cannot be trusted (verify fails the node, the heartbeat triggers).
FATAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})
# NVML errors that mean there is no driver at all: a skip, never a failure.
_NO_DRIVER_ERRORS = ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")
NO_DRIVER = "no NVIDIA driver"


def load(extra_paths: tuple[str, ...] | list[str] = ()) -> tuple[Any, str | None]:
    """``pynvml``, or None and why; EXTRA_PATHS (venvs or site-packages) after sys.path."""
    for path in extra_paths:
        sys.path.extend(glob.glob(os.path.join(path, "lib", "python3*", "site-packages")))
        sys.path.append(path)
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py not installed"
    return pynvml, None


def init(nv: Any) -> str | None:
    """Initialise NVML; None when it answers, else why not (NO_DRIVER or the error)."""
    try:
        nv.nvmlInit()
    except nv.NVMLError as err:
        if type(err).__name__ in _NO_DRIVER_ERRORS:
            return NO_DRIVER
        return f"NVML init failed: {err}"
    return None


def handles(nv: Any) -> list[Any]:
    """One handle per GPU, in NVML's index order (after ``init``)."""
    return [nv.nvmlDeviceGetHandleByIndex(i) for i in range(int(nv.nvmlDeviceGetCount()))]


def text(value: object) -> str:
    """NVML strings are bytes in older bindings, str in newer ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


def uuid(nv: Any, handle: Any) -> str:
    """The GPU's NVML UUID (GPU-...), the label that follows a board across index changes;
    empty when the board does not report one."""
    try:
        return text(nv.nvmlDeviceGetUUID(handle))
    except nv.NVMLError:
        return ""


def ecc_uncorrected(nv: Any, handle: Any) -> int | None:
    """Volatile uncorrected ECC errors, None where ECC is off or not supported."""
    try:
        kind, counter = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
        return int(nv.nvmlDeviceGetTotalEccErrors(handle, kind, counter))
    except nv.NVMLError:
        return None


def read(nv: Any, handle: Any) -> dict[str, Any]:
    """One GPU's health counters: temperature, memory and compute use, uncorrected ECC."""
    mem = nv.nvmlDeviceGetMemoryInfo(handle)
    return {
        "temperature_c": float(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)),
        "memory_used_ratio": float(mem.used) / float(mem.total) if mem.total else 0.0,
        "utilization_ratio": float(nv.nvmlDeviceGetUtilizationRates(handle).gpu) / 100.0,
        "ecc_uncorrected": ecc_uncorrected(nv, handle),
    }


def nvidia_devices(root: str = "/") -> list[str]:
    """The node's NVIDIA GPUs as the kernel sees them, with or without a driver.

    PCI display controllers of vendor 0x10de (``/sys/bus/pci/devices/*/vendor`` and
    ``class`` 0x03xxxx; a GPU's audio function does not count) and ``/dev/nvidia<N>``
    device nodes. Empty on a node without NVIDIA GPUs.
    """
    found = []
    for device in sorted(glob.glob(os.path.join(root, "sys/bus/pci/devices/*"))):
        try:
            with open(os.path.join(device, "vendor")) as handle:
                vendor = handle.read().strip()
            with open(os.path.join(device, "class")) as handle:
                klass = handle.read().strip()
        except OSError:
            continue
        if vendor.lower() == "0x10de" and klass.lower().startswith("0x03"):
            found.append(f"PCI {os.path.basename(device)}")
    nodes = glob.glob(os.path.join(root, "dev/nvidia[0-9]*"))
    found += sorted(os.path.basename(node) for node in nodes)
    return found
