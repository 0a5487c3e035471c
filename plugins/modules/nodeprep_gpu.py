#!/usr/bin/python
"""Read every NVIDIA GPU through NVML and judge driver, count, temperature, ECC and XIDs."""

from __future__ import annotations

import re
import subprocess
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

# The heartbeat's own NVML reading: the same file as nodeprep.heartbeat.nvml.
from ansible_collections.nodeprep.hardening.plugins.module_utils import nvml

DOCUMENTATION = r"""
module: nodeprep_gpu
short_description: Judge the node's NVIDIA GPUs for nodeprep verify.
description:
  - Imports pynvml (nvidia-ml-py) on the node, reads the driver version, the GPU count,
    each GPU's temperature and volatile uncorrected ECC errors, and scans the kernel log
    for NVRM XID lines. Returns one verdict per check under C(checks) for
    C(nodeprep_check) to report; with no library or no driver the checks skip and say why.
options:
  nvml_paths:
    description: Venvs or site-packages directories to look in for pynvml when the node's
      Python lacks it (the heartbeat role's venv holds it when GPU probing is on).
    type: list
    elements: path
    default: []
  expected_count:
    description: GPUs the node must show; 0 means at least one.
    type: int
    default: 0
  max_temp_c:
    description: Highest GPU temperature in degrees Celsius; C(gpu.temperature) fails above it.
    type: float
    default: 85
  max_ecc_uncorrected:
    description:
      - Most volatile uncorrected ECC errors a GPU may show; C(gpu.ecc) fails above it.
    type: int
    default: 0
  critical_xids:
    description: XID codes that fail the node when seen in the kernel log since boot.
    type: list
    elements: int
    default: [48, 63, 64, 74, 79, 92, 94, 95, 119, 120]
notes:
  - Supports check mode; the module only reads.
  - The kernel log is read with C(dmesg); where that is not allowed, C(gpu.xid) skips.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Read the GPUs through NVML and the kernel log.
  nodeprep.hardening.nodeprep_gpu:
    nvml_paths: [/opt/nodeprep/heartbeat-venv]
    expected_count: 8
    max_temp_c: 85
  register: gpu
  timeout: 60
  check_mode: false

- name: Report the GPU checks.
  nodeprep.hardening.nodeprep_check:
    check: "{{ item.check }}"
    passed: "{{ item.passed }}"
    since: "{{ gpu.started }}"
    skip: "{{ item.skip or omit }}"
    detail: "{{ item.detail or item.skip }}"
  loop: "{{ gpu.checks }}"
"""

RETURN = r"""
started:
  description: Epoch seconds when the module started, for the I(since) option of nodeprep_check.
  returned: always
  type: float
  sample: 1718000000.123
reading:
  description:
    - What NVML reported. Holds only C(missing) when pynvml or the driver is absent, only
      C(error) when NVML failed otherwise, and C(driver) and C(gpus) when it answered.
  returned: always
  type: dict
  contains:
    missing:
      description: Why there is nothing to read (no pynvml, or no NVIDIA driver).
      type: str
    error:
      description: The NVML error that stopped the reading.
      type: str
    driver:
      description: The NVIDIA driver version.
      type: str
    gpus:
      description:
        - One entry per GPU with C(index), C(name), C(temperature_c) and
          C(ecc_uncorrected) (null where ECC is off or not supported).
      type: list
      elements: dict
  sample:
    driver: "550.54.15"
    gpus:
      - {index: 0, name: NVIDIA H100 80GB HBM3, temperature_c: 34.0, ecc_uncorrected: 0}
checks:
  description:
    - The verdicts of C(gpu.driver), C(gpu.count), C(gpu.temperature), C(gpu.ecc) and
      C(gpu.xid), in that order. Without a reading, C(gpu.driver) skips when the library or
      driver is missing and fails on an NVML error, and the other four skip.
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: The check name.
      type: str
    passed:
      description: Whether the GPUs meet the expectation.
      type: bool
    detail:
      description: What was seen, and on failure what to do about it.
      type: str
    skip:
      description: Why the check does not apply, or an empty string.
      type: str
  sample:
    - check: gpu.driver
      passed: true
      detail: NVIDIA driver 550.54.15
      skip: ""
    - check: gpu.count
      passed: true
      detail: 8 GPU(s) (NVIDIA H100 80GB HBM3), expected 8
      skip: ""
"""

_XID = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)")


def load_nvml(paths: list[str]) -> tuple[Any, str | None]:
    """pynvml, or None and why; the given venvs are searched after the node's own Python."""
    nv, missing = nvml.load(paths)
    return nv, (None if nv is not None else f"{missing} on this node")


def read_gpus(nv: Any) -> dict[str, Any]:
    """Driver, and per GPU name, temperature and uncorrected ECC (None when not supported)."""
    problem = nvml.init(nv)
    if problem == nvml.NO_DRIVER:
        return {"missing": f"{problem} (libnvidia-ml not found or driver not loaded)"}
    if problem is not None:
        return {"error": problem}
    try:
        gpus = []
        for index, handle in enumerate(nvml.handles(nv)):
            found = nvml.read(nv, handle)
            gpus.append(
                {
                    "index": index,
                    "name": nvml.text(nv.nvmlDeviceGetName(handle)),
                    "temperature_c": found["temperature_c"],
                    "ecc_uncorrected": found["ecc_uncorrected"],
                }
            )
        return {"driver": nvml.text(nv.nvmlSystemGetDriverVersion()), "gpus": gpus}
    except nv.NVMLError as err:
        return {"error": f"NVML read failed: {err}"}
    finally:
        nv.nvmlShutdown()


def account_for_devices(reading: dict[str, Any], devices: list[str]) -> dict[str, Any]:
    """Without NVML, no NVIDIA device is a skip; NVIDIA devices NVML cannot read are a fail."""
    if "gpus" in reading:
        return reading
    if not devices:
        return {"missing": "no NVIDIA GPU on this node"}
    why = str(reading.get("missing") or reading.get("error"))
    shown = ", ".join(devices[:4]) + (f" and {len(devices) - 4} more" if len(devices) > 4 else "")
    return {
        "error": f"this node has NVIDIA GPU(s) ({shown}) but NVML cannot read them: {why}; "
        "install the NVIDIA driver and nvidia-ml-py (the heartbeat role's venv has it with "
        "GPU probing on), or set node_checks_gpu_nvml_paths to a venv that has it"
    }


def xids_from_log(text: str) -> list[tuple[str, int]]:
    """(PCI address, XID code) for every NVRM XID line of a kernel log."""
    return [(m.group(1).split(",")[0], int(m.group(2))) for m in _XID.finditer(text)]


def kernel_log() -> tuple[str | None, str | None]:
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"dmesg could not run ({exc})"
    if done.returncode != 0:
        return None, f"the kernel log is not readable ({done.stderr.strip() or done.returncode})"
    return done.stdout, None


def evaluate(
    reading: dict[str, Any], log: str | None, log_problem: str | None, limits: dict[str, Any]
) -> list[dict[str, Any]]:
    """One verdict per check: check, passed, detail, and skip (a reason) where it cannot apply."""
    if "missing" in reading or "error" in reading:
        why = str(reading.get("missing") or reading.get("error"))
        driver = {
            "check": "gpu.driver",
            "passed": False,
            "detail": why,
            "skip": "" if "error" in reading else why,
        }
        rest = [
            {"check": f"gpu.{n}", "passed": False, "detail": why, "skip": f"no GPU to read: {why}"}
            for n in ("count", "temperature", "ecc", "xid")
        ]
        return [driver, *rest]
    gpus: list[dict[str, Any]] = reading["gpus"]
    want = int(limits["expected_count"])
    names = ", ".join(sorted({str(g["name"]) for g in gpus})) or "none"
    count_ok = len(gpus) == want if want else len(gpus) > 0
    checks = [
        {"check": "gpu.driver", "passed": True, "detail": f"NVIDIA driver {reading['driver']}"},
        {
            "check": "gpu.count",
            "passed": count_ok,
            "detail": f"{len(gpus)} GPU(s) ({names}), expected {want or 'at least 1'}",
        },
        _temperature(gpus, float(limits["max_temp_c"])),
        _ecc_check(gpus, int(limits["max_ecc_uncorrected"])),
        _xid_check(log, log_problem, [int(x) for x in limits["critical_xids"]]),
    ]
    return [{"skip": "", **c} for c in checks]


def _temperature(gpus: list[dict[str, Any]], limit: float) -> dict[str, Any]:
    hot = [
        f"gpu{g['index']} {g['temperature_c']:g} C"
        for g in gpus
        if float(g["temperature_c"]) > limit
    ]
    top = max((float(g["temperature_c"]) for g in gpus), default=0.0)
    if hot:
        return {
            "check": "gpu.temperature",
            "passed": False,
            "detail": f"{', '.join(hot)} above {limit:g} C; check cooling and airflow",
        }
    return {
        "check": "gpu.temperature",
        "passed": True,
        "detail": f"hottest {top:g} C <= {limit:g} C",
    }


def _ecc_check(gpus: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    known = [g for g in gpus if g["ecc_uncorrected"] is not None]
    if not known:
        return {
            "check": "gpu.ecc",
            "passed": False,
            "detail": "",
            "skip": "ECC is off or not supported on these GPUs",
        }
    bad = [
        f"gpu{g['index']} {g['ecc_uncorrected']}"
        for g in known
        if int(g["ecc_uncorrected"]) > limit
    ]
    if bad:
        return {
            "check": "gpu.ecc",
            "passed": False,
            "detail": f"uncorrected ECC errors {', '.join(bad)} > {limit}; "
            "drain the node and reset the GPU",
        }
    return {
        "check": "gpu.ecc",
        "passed": True,
        "detail": f"{len(known)} GPU(s) with <= {limit} uncorrected ECC errors",
    }


def _xid_check(log: str | None, problem: str | None, critical: list[int]) -> dict[str, Any]:
    if log is None:
        return {"check": "gpu.xid", "passed": False, "detail": "", "skip": str(problem)}
    seen = xids_from_log(log)
    bad = sorted({f"XID {code} on {pci}" for pci, code in seen if code in critical})
    if bad:
        return {
            "check": "gpu.xid",
            "passed": False,
            "detail": f"critical {', '.join(bad)} in the kernel log since boot; drain the node",
        }
    return {
        "check": "gpu.xid",
        "passed": True,
        "detail": f"no critical XID in the kernel log ({len(seen)} XID line(s) in all)",
    }


def main() -> None:
    started = time.time()
    module = AnsibleModule(
        argument_spec={
            "nvml_paths": {"type": "list", "elements": "path", "default": []},
            "expected_count": {"type": "int", "default": 0},
            "max_temp_c": {"type": "float", "default": 85},
            "max_ecc_uncorrected": {"type": "int", "default": 0},
            "critical_xids": {
                "type": "list",
                "elements": "int",
                "default": sorted(nvml.FATAL_XIDS),
            },
        },
        supports_check_mode=True,
    )
    nv, missing = load_nvml(module.params["nvml_paths"])
    reading = {"missing": missing} if nv is None else read_gpus(nv)
    reading = account_for_devices(reading, nvml.nvidia_devices())
    log, log_problem = kernel_log() if "gpus" in reading else (None, None)
    checks = evaluate(reading, log, log_problem, module.params)
    module.exit_json(changed=False, started=started, reading=reading, checks=checks)


if __name__ == "__main__":
    main()
