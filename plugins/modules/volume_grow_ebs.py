#!/usr/bin/python
"""Plan and wait for an EBS volume modification (the parts amazon.aws.ec2_vol lacks)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: volume_grow_ebs
short_description: Check an EBS grow before it starts, and wait for it to take effect.
description:
  - C(state=plan) reads the volume and its modification history, refuses a shrink, an
    unknown volume and a volume modified within the cooldown, and returns what must be
    preserved (type, IOPS, throughput) so that a resize never changes anything else.
  - C(state=wait) polls DescribeVolumesModifications until the newest modification is
    C(optimizing) or C(completed), when the new size is usable by the instance.
  - Never modifies the volume itself; amazon.aws.ec2_vol does that between the two states.
options:
  volume_id:
    description: The EC2 volume id, for example C(vol-0123456789abcdef0).
    type: str
    required: true
  size_gb:
    description:
      - The size to grow to, in GiB; at least 1, and never below the volume's current size.
      - Only I(state=plan) uses it, but it is required in both states.
    type: int
    required: true
  state:
    description:
      - C(plan) checks the grow and returns what to preserve; C(wait) waits for the newest
        modification to become usable.
    type: str
    choices: [plan, wait]
    default: plan
  cooldown_hours:
    description:
      - EC2's minimum time between two modifications of one volume. With I(state=plan), a
        grow is refused while the last modification is more recent than this.
    type: float
    default: 6
  wait_seconds:
    description: How long I(state=wait) polls, in seconds, before it fails.
    type: int
    default: 900
notes:
  - Supports check mode; the module only reads from the EC2 API.
extends_documentation_fragment: [amazon.aws.common.modules, amazon.aws.region.modules]
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Check the EBS volume before growing it.
  nodeprep.hardening.volume_grow_ebs:
    volume_id: vol-0123456789abcdef0
    size_gb: 500
    state: plan
    cooldown_hours: 6
    region: eu-west-1
  register: plan
  delegate_to: localhost
  become: false

- name: Wait until the grown volume's new size is usable.
  nodeprep.hardening.volume_grow_ebs:
    volume_id: "{{ plan.volume_id }}"
    size_gb: "{{ plan.target_size_gb }}"
    state: wait
    wait_seconds: 900
    region: eu-west-1
  when: plan.needs_grow
  delegate_to: localhost
  become: false
"""

RETURN = r"""
volume_id:
  description: The EC2 volume id.
  returned: always
  type: str
  sample: vol-0123456789abcdef0
current_size_gb:
  description: The volume's size now, in GiB.
  returned: when I(state=plan)
  type: int
  sample: 200
target_size_gb:
  description: The requested size, I(size_gb), in GiB.
  returned: when I(state=plan)
  type: int
  sample: 500
needs_grow:
  description: Whether the requested size is larger than the current one.
  returned: when I(state=plan)
  type: bool
  sample: true
volume_type:
  description: The volume type, to pass on unchanged when resizing.
  returned: when I(state=plan)
  type: str
  sample: gp3
iops:
  description: The provisioned IOPS, to pass on unchanged; null where the type has none.
  returned: when I(state=plan)
  type: int
  sample: 3000
throughput:
  description: The provisioned throughput in MiB/s (gp3 only), to pass on unchanged; else null.
  returned: when I(state=plan)
  type: int
  sample: 125
zone:
  description: The availability zone the volume is in.
  returned: when I(state=plan)
  type: str
  sample: eu-west-1a
modification_state:
  description: State of the newest modification, C(optimizing) or C(completed).
  returned: when I(state=wait)
  type: str
  sample: optimizing
progress:
  description: Progress of the newest modification in percent, as EC2 reports it.
  returned: when I(state=wait)
  type: int
  sample: 10
"""

import contextlib

# amazon.aws and botocore ship no type information: both are Any here (pyproject's mypy).
from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
from ansible_collections.nodeprep.hardening.plugins.module_utils import volume_grow as vg

with contextlib.suppress(ImportError):  # AnsibleAWSModule reports a missing botocore itself.
    import botocore


def main() -> None:
    module = AnsibleAWSModule(
        argument_spec=dict(
            volume_id=dict(type="str", required=True),
            size_gb=dict(type="int", required=True),
            state=dict(type="str", choices=["plan", "wait"], default="plan"),
            cooldown_hours=dict(type="float", default=6),
            wait_seconds=dict(type="int", default=900),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not vg.VOLUME_ID.match(p["volume_id"]):
        module.fail_json(
            msg="{!r} is not an EBS volume id; ids look like vol-0123456789abcdef0.".format(
                p["volume_id"]
            )
        )
    if p["size_gb"] < 1:
        module.fail_json(msg="size_gb must be a positive number of GiB.")
    ec2 = module.client("ec2")
    try:
        if p["state"] == "plan":
            plan = vg.ebs_plan(
                ec2, p["volume_id"], p["size_gb"], p["cooldown_hours"], module.region
            )
            module.exit_json(changed=False, **plan)
        newest = vg.ebs_wait(ec2, p["volume_id"], p["wait_seconds"])
    except vg.GrowError as exc:
        module.fail_json(msg=str(exc))
    except botocore.exceptions.ClientError as exc:
        module.fail_json_aws(exc, msg=f"EC2 refused a call about {p['volume_id']}")
    module.exit_json(
        changed=False,
        volume_id=p["volume_id"],
        modification_state=newest["ModificationState"],
        progress=newest.get("Progress"),
    )


if __name__ == "__main__":
    main()
