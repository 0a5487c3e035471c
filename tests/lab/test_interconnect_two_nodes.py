"""verify's interconnect check between two lab nodes: their bond segments wired together
(node.Link), the bond and apptainer with the trainer image applied to both, then
`nodeprep verify --checks interconnect --fast` (torchrun inside the image on both nodes, the
c10d rendezvous on node1's bond address, gloo over the bonds). The role's defaults pass; with
120 ms of netem delay on node2's bond, every all-reduce round takes longer than
interconnect_max_latency_ms (100), and both nodes' checks fail naming the measured latency and
the limit. The delay is removed even when the run fails.

Marked ``lab_long``: on 2 cores under TCG, putting the image and apptainer on two nodes takes
about 5 minutes and each measurement a few more (every torch start on an emulated node takes
minutes), more than the CI budget leaves; `make test-lab-long` runs it. The same check under
Mitogen and the linear strategy, between two agents on one machine, is in `make test`
(tests/integration/verify/test_interconnect_local.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from lab_helpers import node_sh as sh
from lab_helpers import provision_with_image
from verify_helpers import SLOW_NODE_VARS, run_verify

from nodeprep.lab.state import LabState

pytestmark = [pytest.mark.lab, pytest.mark.lab_long, pytest.mark.timeout(2400)]
NODES = ("node1", "node2")
NETEM = "sudo tc qdisc add dev bond0 root netem delay 120ms"


def checks(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {r["host"]: (r["status"], r["detail"]) for r in report["results"]
            if r["check"] == "interconnect.allreduce"}  # fmt: skip


def test_interconnect_passes_the_defaults_then_fails_by_latency_under_netem(
    fleet: LabState, tmp_path: Path, torch_image: Path
) -> None:
    inventory = provision_with_image(tmp_path, torch_image, "nic_bond,apptainer", "--no-rolling")

    code, output, report = run_verify(inventory, tmp_path, "interconnect", "--fast", "--checks",
                                      "interconnect", node_vars=SLOW_NODE_VARS)  # fmt: skip
    seen = checks(report)
    assert code == 0, output
    assert {name: status for name, (status, _) in seen.items()} == dict.fromkeys(NODES, "pass")
    for _, detail in seen.values():
        assert detail.startswith("all-reduce among 2 nodes (2 ranks, gloo): bus bandwidth "), detail
    print("interconnect over the lab's bonds:", json.dumps(seen), flush=True)

    sh(fleet, "node2", NETEM)
    try:
        code, output, report = run_verify(inventory, tmp_path, "interconnect-netem", "--fast",
                                          "--checks", "interconnect",
                                          node_vars=SLOW_NODE_VARS)  # fmt: skip
    finally:
        sh(fleet, "node2", "sudo tc qdisc del dev bond0 root")
    seen = checks(report)
    print("interconnect with 120 ms netem on node2's bond:", json.dumps(seen), flush=True)
    assert code == 1, output
    assert {name: status for name, (status, _) in seen.items()} == dict.fromkeys(NODES, "fail")
    for _, detail in seen.values():
        assert re.search(r"latency [\d.e+]+ ms at 4 KiB is above interconnect_max_latency_ms 100 ",
                         detail), detail  # fmt: skip
