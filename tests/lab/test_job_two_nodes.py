"""The two-node job story on the lab (tests/lab/job_two_nodes.py), on two fresh nodes: the
metadata stand-in on both; tmux, the bond (their segments wired together), apptainer with the
trainer image and the heartbeat provisioned; then run / status / logout / drill kill, netem
and link on node2 / blackhole missed by MII, the bonds switched to ARP monitoring / drill
blackhole, ssh-drop, disk-full, preempt and reboot on node2 / both nodes as they were / a
power cycle of node2 / stop / the bit-exact finish / verify on both nodes.

Marked ``lab_long``: on 2 cores under TCG it takes most of an hour (every torch start on the
emulated nodes takes minutes), more than the CI budget leaves, so `make test` leaves it out
and `make test-lab-long` runs it. NODEPREP_TEST_KEEP=DIR keeps its transcript and figures.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import job_two_nodes
import pytest
from lab_helpers import lab_cli as lab
from lab_helpers import node_sh as sh
from lab_helpers import provision_with_image

from nodeprep.lab.ssh import SshTarget
from nodeprep.lab.state import LabState

pytestmark = [pytest.mark.lab, pytest.mark.lab_long, pytest.mark.timeout(7200)]
KEEP = os.environ.get("NODEPREP_TEST_KEEP", "")


def test_two_node_job_survives_every_drill_and_a_power_cycle_and_ends_bit_exact(
    fleet: LabState, tmp_path: Path, torch_image: Path
) -> None:
    for node in job_two_nodes.NODES:  # the stand-in IMDS the heartbeat's plan looks for
        lab("metadata", node, "up")
    inventory = provision_with_image(tmp_path, torch_image, "tmux,nic_bond,apptainer,heartbeat",
                                     "-e", "heartbeat_cloud=aws")  # fmt: skip
    keep = Path(KEEP) if KEEP else None
    ports = {node.name: node.ssh_port for node in fleet.nodes}

    def argv(node: str, command: list[str]) -> list[str]:
        return SshTarget(ports[node], Path(fleet.key)).argv(command)

    story = job_two_nodes.Story(functools.partial(sh, fleet), lab, inventory, dict(os.environ),
                                tmp_path, keep / "job-two-nodes.txt" if keep else None,
                                argv)  # fmt: skip
    figures = job_two_nodes.story(story)
    print("two-node job figures:", json.dumps(figures, sort_keys=True))
    if keep:
        (keep / "job-two-nodes.json").write_text(json.dumps(figures, indent=1) + "\n")
