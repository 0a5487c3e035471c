"""`nodeprep verify --checks interconnect` on two inventory nodes that are both this machine
(local connection): two torchrun agents meet at a real c10d rendezvous on 127.0.0.1, as two
nodes do on their network, and time a real gloo all-reduce over loopback. The check passes
within the defaults and fails naming the figure and the limit it missed (one measurement,
limits per node); it skips with one node; nothing starts when a node cannot take part, and
the other names it; two nodes that cannot meet fail with torchrun's rendezvous error.

No image here (Apptainer is the lab's): job_launcher puts this venv's python first on PATH.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodeprep.cli import cli
from ports import reserved_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def inventory(tmp_path: Path, node_a: str = "", node_b: str = "") -> Path:
    """Two nodes without a job_address: torchrun on each tries to host the rendezvous at
    127.0.0.1, and the one that finds the port taken joins the other's (gloo on lo)."""
    python = f"ansible_connection=local ansible_python_interpreter={sys.executable}"
    path = tmp_path / "two.ini"
    path.write_text(f"[nodes]\nnode-a {python} {node_a}\nnode-b {python} {node_b}\n")
    return path


def verify(inv: Path, tmp_path: Path, *args: str, **given: Any) -> tuple[int, str, dict[str, Any]]:
    variables = {
        "job_launcher": ["env", f"PATH={Path(sys.executable).parent}:/usr/bin:/bin"],
        "job_user": "root" if os.geteuid() == 0 else os.environ.get("USER", "root"),
        "job_env": {"GLOO_SOCKET_IFNAME": "lo", "PYTHONWARNINGS": "ignore"},
        "job_rdzv_host": "127.0.0.1",
        "interconnect_rdzv_port": reserved_port(), "interconnect_iters": 5, **given,
    }  # fmt: skip
    variables = {name: value for name, value in variables.items() if value is not None}
    out = tmp_path / "report.json"
    out.unlink(missing_ok=True)
    result = CliRunner().invoke(cli, ["verify", str(inv), "--checks", "interconnect", "--json",
                                      str(out), "-e", json.dumps(variables), *args])  # fmt: skip
    return result.exit_code, result.output, json.loads(out.read_text()) if out.exists() else {}


def checks(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {r["host"]: (r["status"], r["detail"]) for r in report["results"]}


@pytest.mark.parametrize("strategy", [[], ["--fast"]], ids=["linear", "mitogen"])
def test_one_measurement_passes_one_node_and_fails_the_other_on_its_own_limit(
    tmp_path: Path, strategy: list[str]
) -> None:
    """The limits are per node: node-b asks for more bus bandwidth than loopback gives. Under
    both strategies: Mitogen's (--fast) never finished the measurement when it was an async
    task of the module itself (ansible-core 2.19), which a lab fleet found."""
    code, out, report = verify(inventory(tmp_path, node_b="interconnect_min_busbw_gbps=100000"),
                               tmp_path, *strategy)  # fmt: skip
    assert code == 1, out
    found = checks(report)
    assert set(found) == {"node-a", "node-b"}, found
    for _, detail in found.values():
        assert "all-reduce among 2 nodes (2 ranks, gloo): bus bandwidth " in detail, detail
    assert found["node-a"][0] == "pass", found
    assert "(min 0.05)" in found["node-a"][1], found
    assert "(max 100)" in found["node-a"][1], found
    assert found["node-b"][0] == "fail", found
    assert (
        " at 16 MiB is below interconnect_min_busbw_gbps 100000 (all-reduce among 2"
        in (found["node-b"][1])
    ), found
    print(found["node-a"][1])


def test_one_node_skips_and_a_node_that_cannot_join_fails_with_the_reason(tmp_path: Path) -> None:
    code, out, report = verify(inventory(tmp_path), tmp_path, "--limit", "node-a")
    assert code == 0, out
    assert checks(report) == {"node-a": ("skip", "one node selected: no interconnect between "
                                         "nodes to measure; select two or more")}  # fmt: skip

    # node-b's job_address is not one of its addresses (a documentation address, only compared
    # with the node's own): nothing starts; node-b says why and node-a names node-b.
    code, out, report = verify(inventory(tmp_path, node_b="job_address=192.0.2.7"), tmp_path)
    assert code == 1, out
    assert checks(report) == {
        "node-a": ("fail", "not measured: node-b cannot take part (see its interconnect.allreduce, "
                   "or bring it back), and the all-reduce needs every selected node"),
        "node-b": ("fail", "job_address 192.0.2.7 is not an address of "
                   f"{os.uname()[1]}; set job_address to its address on the network between "
                   "the nodes"),
    }  # fmt: skip

    # node-b's user does not exist: its module fails, and node-a names node-b.
    code, out, report = verify(inventory(tmp_path, node_b="interconnect_user=nosuchuser"),
                               tmp_path)  # fmt: skip
    assert code == 1, out
    found = checks(report)
    assert found["node-a"][1].startswith("not measured: node-b cannot take part"), found
    assert found["node-b"][0] == "fail", found
    assert "user nosuchuser does not exist" in found["node-b"][1], found

    # Each node looks for the rendezvous on a port of its own: neither completes it.
    began = time.monotonic()
    ports = (reserved_port(), reserved_port())  # two different ports: each is handed out once
    apart = inventory(tmp_path, *(f"interconnect_rdzv_port={port}" for port in ports))
    code, out, report = verify(apart, tmp_path, interconnect_timeout_s=8,
                               interconnect_rdzv_port=None)  # fmt: skip
    assert code == 1, out
    for status, detail in checks(report).values():
        assert status == "fail", detail
        assert "the all-reduce among 2 nodes (rendezvous 127.0.0.1:" in detail, detail
        assert "RendezvousTimeoutError" in detail, detail
    assert time.monotonic() - began < 120
