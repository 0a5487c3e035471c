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
options:
  volume_id: {type: str, required: true, description: The EC2 volume id.}
  size_gb: {type: int, required: true, description: The size to grow to, in GiB.}
  state: {type: str, choices: [plan, wait], default: plan, description: What to do.}
  cooldown_hours: {type: float, default: 6, description: EC2's minimum time between modifications.}
  wait_seconds: {type: int, default: 900, description: How long to wait in C(state=wait).}
extends_documentation_fragment: [amazon.aws.common.modules, amazon.aws.region.modules]
"""

import re
import time
from datetime import datetime, timedelta, timezone

from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule

try:
    import botocore
except ImportError:  # AnsibleAWSModule reports the missing library itself.
    pass

VOLUME_ID = re.compile(r"^vol-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
USABLE = ("optimizing", "completed")


def describe(module, ec2, volume_id):
    try:
        return ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
    except botocore.exceptions.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in ("InvalidVolume.NotFound", "InvalidVolume.Malformed"):
            module.fail_json(msg="EBS volume %s does not exist in region %s; check the id in "
                                 "volume_grow_volumes." % (volume_id, module.region))
        module.fail_json_aws(exc, msg="Could not describe EBS volume %s" % volume_id)


def modifications(module, ec2, volume_id):
    try:
        found = ec2.describe_volumes_modifications(VolumeIds=[volume_id])
    except botocore.exceptions.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "InvalidVolumeModification.NotFound":
            return []
        module.fail_json_aws(exc, msg="Could not read modifications of %s" % volume_id)
    return sorted(found.get("VolumesModifications", []), key=lambda m: m["StartTime"])


def plan(module, ec2):
    volume_id, size_gb = module.params["volume_id"], module.params["size_gb"]
    volume = describe(module, ec2, volume_id)
    current = int(volume["Size"])
    if size_gb < current:
        module.fail_json(msg="Refusing to shrink EBS volume %s from %d GiB to %d GiB: EBS "
                             "volumes can only grow; set size_gb to %d or more."
                             % (volume_id, current, size_gb, current))
    result = dict(changed=False, volume_id=volume_id, current_size_gb=current,
                  target_size_gb=size_gb, needs_grow=size_gb > current,
                  volume_type=volume.get("VolumeType"), iops=volume.get("Iops"),
                  throughput=volume.get("Throughput"), zone=volume.get("AvailabilityZone"))
    history = modifications(module, ec2, volume_id)
    if result["needs_grow"] and history:
        last = history[-1]["StartTime"]
        retry_at = last + timedelta(hours=module.params["cooldown_hours"])
        if datetime.now(timezone.utc) < retry_at:
            module.fail_json(msg="EBS volume %s was modified at %s; EC2 allows one modification "
                                 "per volume every %g hours, so retry after %s."
                                 % (volume_id, last.isoformat(), module.params["cooldown_hours"],
                                    retry_at.isoformat()))
    module.exit_json(**result)


def wait(module, ec2):
    volume_id, deadline = module.params["volume_id"], time.monotonic() + module.params["wait_seconds"]
    while True:
        history = modifications(module, ec2, volume_id)
        state = history[-1]["ModificationState"] if history else "none"
        if state in USABLE:
            module.exit_json(changed=False, volume_id=volume_id, modification_state=state,
                             progress=history[-1].get("Progress"))
        if state == "failed":
            module.fail_json(msg="The modification of EBS volume %s failed: %s"
                                 % (volume_id, history[-1].get("StatusMessage", "no reason given")))
        if time.monotonic() > deadline:
            module.fail_json(msg="EBS volume %s did not reach optimizing within %d s (state %s); "
                                 "raise volume_grow_api_wait_seconds or check the AWS console."
                                 % (volume_id, module.params["wait_seconds"], state))
        time.sleep(2)


def main():
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
        module.fail_json(msg="%r is not an EBS volume id; ids look like vol-0123456789abcdef0."
                             % module.params["volume_id"])
    if module.params["size_gb"] < 1:
        module.fail_json(msg="size_gb must be a positive number of GiB.")
    ec2 = module.client("ec2")
    plan(module, ec2) if module.params["state"] == "plan" else wait(module, ec2)


if __name__ == "__main__":
    main()
