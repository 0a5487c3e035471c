#!/usr/bin/python
"""Compose the heartbeat's default probes from what the node is (module_utils.probe_plan)."""

from __future__ import annotations

import grp
import http.client

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.nodeprep.hardening.plugins.module_utils import probe_plan
from ansible_collections.nodeprep.hardening.plugins.module_utils.cloud_metadata import (
    DMI_DIR,
    PROVIDERS,
    client,
    cloud_from_dmi,
    describe,
)

DOCUMENTATION = r"""
module: heartbeat_probe_plan
short_description: Compose the heartbeat's default probes from what the node is.
description:
  - Finds which cloud the node runs on from its firmware's DMI strings (no network
    exchange), and on a cloud VM asks the metadata service once whether it answers (AWS
    IMDSv2 with its token, GCP with C(Metadata-Flavor), Azure with C(Metadata)).
  - Composes the probe list - the metadata service and its notices where it answered; the
    bond's peer, else the IPv4 default route's gateway; writes and free space on the
    filesystem of every path in I(watch_paths); the GPUs where NVIDIA PCI devices exist;
    the registered trainers' progress - each with why it was chosen, and says what it
    could not watch and why.
  - Reads only; never changes the node.
options:
  cloud:
    description:
      - C(auto) finds the cloud from DMI; a provider name says which cloud the node is on;
        C(none) says it is on none (no metadata exchange at all).
    type: str
    choices: [auto, aws, gcp, azure, none]
    default: auto
  metadata_url:
    description: Where the metadata service answers.
    type: str
    default: http://169.254.169.254
  metadata_timeout:
    description: Seconds to wait for the metadata service's answer.
    type: float
    default: 2.0
  bond_peer:
    description: The address the bond role probes; watched instead of the gateway when set.
    type: str
    default: ""
  group:
    description:
      - The daemon's group; an ICMP probe is composed only where
        C(net.ipv4.ping_group_range) lets it ping (a group not created yet is judged by
        whether the range is open at all).
    type: str
    default: nodeprep-heartbeat
  watch_paths:
    description:
      - Checkpoint and data paths; each filesystem they live on gets a writable and a
        free_space probe. A path that does not exist yet counts for its nearest parent.
    type: list
    elements: path
    default: []
  nvml:
    description:
      - Whether the daemon can read NVML (the role's C(heartbeat_nvml_enabled)); without it
        a GPU probe would only skip, so NVIDIA devices are reported as not watched instead.
    type: bool
    default: false
  dmi_dir:
    description: Where the firmware's DMI strings are read.
    type: path
    default: /sys/class/dmi/id
notes:
  - Supports check mode; the module never changes anything.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Compose the default probes.
  nodeprep.hardening.heartbeat_probe_plan:
    watch_paths: [/data/checkpoints]
    bond_peer: 10.0.0.2
    group: nodeprep-heartbeat
    nvml: true
  register: plan
"""

RETURN = r"""
cloud:
  description: The cloud the node is on (aws, gcp, azure), or none.
  returned: always
  type: str
cloud_evidence:
  description: What said so (the DMI strings, or that the caller named it).
  returned: always
  type: str
probes:
  description: The composed probe list, as the heartbeat daemon's config takes it.
  returned: always
  type: list
  elements: dict
reasons:
  description: Why each probe was chosen, by probe name.
  returned: always
  type: dict
unwatched:
  description: What the plan could not watch on this node, and why.
  returned: always
  type: list
  elements: str
missing:
  description: What a node like this one must be watched for but cannot be (verify fails on it).
  returned: always
  type: list
  elements: str
"""


def _gid(group: str) -> int | None:
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        return None


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            cloud=dict(type="str", choices=["auto", *PROVIDERS, "none"], default="auto"),
            metadata_url=dict(type="str", default="http://169.254.169.254"),
            metadata_timeout=dict(type="float", default=2.0),
            bond_peer=dict(type="str", default=""),
            group=dict(type="str", default="nodeprep-heartbeat"),
            watch_paths=dict(type="list", elements="path", default=[]),
            nvml=dict(type="bool", default=False),
            dmi_dir=dict(type="path", default=DMI_DIR),
        ),
        supports_check_mode=True,
    )
    p = module.params
    node = probe_plan.Node(metadata_url=p["metadata_url"].rstrip("/"))
    if p["cloud"] == "auto":
        node.cloud, node.cloud_evidence = cloud_from_dmi(p["dmi_dir"])
    else:
        node.cloud, node.cloud_evidence = p["cloud"], f"heartbeat_cloud is {p['cloud']}"
    if node.cloud != "none":
        try:
            node.metadata_answer = client(node.cloud, node.metadata_url).answers(
                p["metadata_timeout"]
            )
            node.metadata_ok = True
        except (OSError, http.client.HTTPException, ValueError) as err:
            node.metadata_answer = describe(err)
    node.bond_peer = p["bond_peer"]
    node.gateway = probe_plan.default_gateway()
    node.icmp_closed = probe_plan.icmp_closed(_gid(p["group"]))
    node.filesystems = probe_plan.filesystems(p["watch_paths"])
    node.nvidia = probe_plan.nvidia_devices()
    node.nvml = p["nvml"]
    plan = probe_plan.compose(node)
    module.exit_json(changed=False, cloud=node.cloud, cloud_evidence=node.cloud_evidence, **plan)


if __name__ == "__main__":
    main()
