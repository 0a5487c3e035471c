"""The interconnect check's verdict: the figures ``python -m nodeprep.interconnect`` printed,
judged against the user's limits, as one check result (``interconnect.allreduce``).

Standard library and Python 3.8 only: this runs on the nodes as Ansible module_utils, and the
controller's tests import it too.
"""

from __future__ import annotations

import json
import re
from typing import Any

CHECK = "interconnect.allreduce"
# What says why a run failed, most telling first: torchrun's rendezvous errors, an image
# without the measurement, a worker's exception; torchrun's own closing ChildFailedError says
# only that a worker failed.
_RENDEZVOUS = re.compile(r"Rendezvous\w*Error")
_EXCEPTION = re.compile(r"\b\w*(?:Error|Exception)\b: ")
_TIMED_OUT = re.compile(r"timed out", re.IGNORECASE)


def size_text(nbytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def result(passed: bool, detail: str, skip: str = "") -> dict[str, Any]:
    return {"check": CHECK, "passed": passed, "detail": detail, "skip": skip}


def figures_from(stdout: str) -> dict[str, Any] | None:
    """The last JSON line of the measurement with its ``sizes``, or None."""
    for raw in reversed(stdout.splitlines()):
        line = raw.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("sizes"):
            return value
    return None


def exit_status(value: Any) -> int | None:
    """An exit status as a task result carries it: an int under ansible-core 2.19, the text
    "0" where older versions render templates to strings; None (or "") where the command
    never reported one."""
    if value is None or isinstance(value, bool) or str(value).strip() == "":
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def why_failed(rc: int, stdout: str, stderr: str) -> str:
    """One line for a run that printed no figures: the most telling line of its output."""
    del rc  # the caller says the exit status itself
    lines = [line.strip() for line in (stderr + "\n" + stdout).splitlines() if line.strip()]
    lines = [line for line in lines if "ChildFailedError" not in line]
    for found in (
        [line for line in lines if _RENDEZVOUS.search(line)][-1:],
        [line for line in lines if "No module named" in line][:1],
        [line for line in lines if _EXCEPTION.search(line)][:1],
        [line for line in lines if _TIMED_OUT.search(line)][-1:],
    ):
        if found:
            said = found[0]
            if "No module named" in said and "nodeprep" in said:
                said += " (an image built before this check: build and provision it again)"
            return said[-300:]
    return (lines[-1] if lines else "no output")[-300:]


def judge(figures: dict[str, Any], min_busbw_gbps: float, max_latency_ms: float,
          expected_nodes: int) -> dict[str, Any]:  # fmt: skip
    """Pass when the largest size's bus bandwidth is at least MIN_BUSBW_GBPS and the smallest
    size's time at most MAX_LATENCY_MS (a limit of 0 is not checked), among EXPECTED_NODES."""
    sizes: list[dict[str, Any]] = sorted(figures["sizes"], key=lambda s: s["bytes"])
    small, large = sizes[0], sizes[-1]
    busbw, latency = float(large["busbw_gbps"]), float(small["time_ms"])
    each = ", ".join(
        f"{size_text(s['bytes'])} {s['busbw_gbps']:.3g} Gbit/s in {s['time_ms']:.3g} ms"
        for s in sizes
    )
    summary = (
        f"all-reduce among {figures['nodes']} nodes ({figures['ranks']} ranks, "
        f"{figures['backend']}): bus bandwidth {busbw:.3g} Gbit/s at {size_text(large['bytes'])} "
        f"(min {min_busbw_gbps:g}), latency {latency:.3g} ms at {size_text(small['bytes'])} "
        f"(max {max_latency_ms:g}); {each}"
    )
    problems = []
    if int(figures["nodes"]) != expected_nodes:
        problems.append(f"{figures['nodes']} nodes took part, not the {expected_nodes} selected")
    if min_busbw_gbps > 0 and busbw < min_busbw_gbps:
        problems.append(
            f"bus bandwidth {busbw:.3g} Gbit/s at {size_text(large['bytes'])} is below "
            f"interconnect_min_busbw_gbps {min_busbw_gbps:g}"
        )
    if max_latency_ms > 0 and latency > max_latency_ms:
        problems.append(
            f"latency {latency:.3g} ms at {size_text(small['bytes'])} is above "
            f"interconnect_max_latency_ms {max_latency_ms:g}"
        )
    if problems:
        return result(False, "; ".join(problems) + f" ({summary})")
    return result(True, summary)
