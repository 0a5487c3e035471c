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
import re
import time
from datetime import datetime, timedelta, timezone
from typing import Any

# amazon.aws and botocore ship no type information: both are Any here (pyproject's mypy).
from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule

with contextlib.suppress(ImportError):  # AnsibleAWSModule reports a missing botocore itself.
    import botocore

VOLUME_ID = re.compile(r"^vol-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
USABLE = ("optimizing", "completed")


def describe(module: AnsibleAWSModule, ec2: Any, volume_id: str) -> Any:
    try:
        return ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
    except botocore.exceptions.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in ("InvalidVolume.NotFound", "InvalidVolume.Malformed"):
            module.fail_json(
                msg=f"EBS volume {volume_id} does not exist in region {module.region}; "
                "check the id in volume_grow_volumes."
            )
        module.fail_json_aws(exc, msg=f"Could not describe EBS volume {volume_id}")


def modifications(module: AnsibleAWSModule, ec2: Any, volume_id: str) -> list[dict[str, Any]]:
    try:
        found = ec2.describe_volumes_modifications(VolumeIds=[volume_id])
    except botocore.exceptions.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "InvalidVolumeModification.NotFound":
            return []
        module.fail_json_aws(exc, msg=f"Could not read modifications of {volume_id}")
    return sorted(found.get("VolumesModifications", []), key=lambda m: m["StartTime"])


def plan(module: AnsibleAWSModule, ec2: Any) -> None:
    volume_id, size_gb = module.params["volume_id"], module.params["size_gb"]
    volume = describe(module, ec2, volume_id)
    current = int(volume["Size"])
    if size_gb < current:
        module.fail_json(
            msg=f"Refusing to shrink EBS volume {volume_id} from {current} GiB to {size_gb} GiB: "
            f"EBS volumes can only grow; set size_gb to {current} or more."
        )
    result = dict(
        changed=False,
        volume_id=volume_id,
        current_size_gb=current,
        target_size_gb=size_gb,
        needs_grow=size_gb > current,
        volume_type=volume.get("VolumeType"),
        iops=volume.get("Iops"),
        throughput=volume.get("Throughput"),
        zone=volume.get("AvailabilityZone"),
    )
    history = modifications(module, ec2, volume_id)
    if result["needs_grow"] and history:
        last = history[-1]["StartTime"]
        retry_at = last + timedelta(hours=module.params["cooldown_hours"])
        if datetime.now(timezone.utc) < retry_at:
            module.fail_json(
                msg="EBS volume {} was modified at {}; EC2 allows one modification "
                "per volume every {:g} hours, so retry after {}.".format(
                    volume_id,
                    last.isoformat(),
                    module.params["cooldown_hours"],
                    retry_at.isoformat(),
                )
            )
    module.exit_json(**result)


def wait(module: AnsibleAWSModule, ec2: Any) -> None:
    volume_id, deadline = (
        module.params["volume_id"],
        time.monotonic() + module.params["wait_seconds"],
    )
    while True:
        history = modifications(module, ec2, volume_id)
        state = history[-1]["ModificationState"] if history else "none"
        if state in USABLE:
            module.exit_json(
                changed=False,
                volume_id=volume_id,
                modification_state=state,
                progress=history[-1].get("Progress"),
            )
        if state == "failed":
            module.fail_json(
                msg="The modification of EBS volume {} failed: {}".format(
                    volume_id, history[-1].get("StatusMessage", "no reason given")
                )
            )
        if time.monotonic() > deadline:
            module.fail_json(
                msg=f"EBS volume {volume_id} did not reach optimizing within "
                f"{module.params['wait_seconds']} s (state {state}); "
                "raise volume_grow_api_wait_seconds or check the AWS console."
            )
        time.sleep(2)


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
    if not VOLUME_ID.match(module.params["volume_id"]):
        module.fail_json(
            msg="{!r} is not an EBS volume id; ids look like vol-0123456789abcdef0.".format(
                module.params["volume_id"]
            )
        )
    if module.params["size_gb"] < 1:
        module.fail_json(msg="size_gb must be a positive number of GiB.")
    ec2 = module.client("ec2")
    plan(module, ec2) if module.params["state"] == "plan" else wait(module, ec2)


if __name__ == "__main__":
    main()
