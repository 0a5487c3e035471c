#!/usr/bin/python
"""Check and resize a GCE persistent disk (the GCP half of the volume_grow role's cloud step)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: volume_grow_gce
short_description: Check a GCE persistent disk resize before it starts, and resize it.
description:
  - C(state=plan) reads the disk in its zone and refuses a shrink, an unknown disk and a
    disk that is in another zone (naming the zone it is in); it changes nothing.
  - C(state=resize) checks the same, then calls disks.resize and waits until its zone
    operation is DONE. A disk already at the size is left alone (not changed).
  - Calls the Compute Engine API over HTTPS with the standard library, at I(endpoint_url);
    the token comes from I(access_token) or the controller's C(GCP_ACCESS_TOKEN), for
    example from C(gcloud auth print-access-token). google.cloud.gcp_compute_disk always
    calls compute.googleapis.com and needs google-auth on the controller.
options:
  disk:
    description: The persistent disk's name, for example C(train-data).
    type: str
    required: true
  size_gb:
    description: The size to grow to, in GiB; at least 1, never below the disk's size now.
    type: int
    required: true
  project:
    description: The GCP project that holds the disk; else the controller's C(GCP_PROJECT).
    type: str
  zone:
    description: The zone the disk is in, for example C(europe-west4-a).
    type: str
    required: true
  state:
    description: C(plan) checks and returns the sizes; C(resize) resizes and waits.
    type: str
    choices: [plan, resize]
    default: plan
  access_token:
    description: An OAuth access token with the compute scope; else C(GCP_ACCESS_TOKEN).
    type: str
  endpoint_url:
    description: The Compute Engine API's base URL (the tests point it at a local stand-in).
    type: str
    default: https://compute.googleapis.com/compute/v1
  wait_seconds:
    description: How long C(state=resize) waits for the operation, in seconds.
    type: int
    default: 300
notes:
  - Supports check mode; C(state=resize) then reports what it would change.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Check the persistent disk before resizing it.
  nodeprep.hardening.volume_grow_gce:
    disk: train-data
    size_gb: 500
    project: my-project
    zone: europe-west4-a
    state: plan
  delegate_to: localhost
  become: false

- name: Resize it and wait until the operation is done.
  nodeprep.hardening.volume_grow_gce:
    disk: train-data
    size_gb: 500
    project: my-project
    zone: europe-west4-a
    state: resize
  delegate_to: localhost
  become: false
"""

RETURN = r"""
disk:
  description: The disk's name.
  returned: always
  type: str
  sample: train-data
zone:
  description: The zone it is in.
  returned: always
  type: str
  sample: europe-west4-a
current_size_gb:
  description: The disk's size before this task, in GiB.
  returned: always
  type: int
  sample: 200
target_size_gb:
  description: The requested size, in GiB.
  returned: always
  type: int
  sample: 500
needs_grow:
  description: Whether the requested size is larger than the current one.
  returned: always
  type: bool
  sample: true
disk_type:
  description: The disk's type (its last URL segment), kept as it is by a resize.
  returned: always
  type: str
  sample: pd-balanced
"""

from ansible.module_utils.basic import AnsibleModule, env_fallback
from ansible_collections.nodeprep.hardening.plugins.module_utils import volume_grow as vg


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            disk=dict(type="str", required=True),
            size_gb=dict(type="int", required=True),
            project=dict(type="str", fallback=(env_fallback, ["GCP_PROJECT"])),
            zone=dict(type="str", required=True),
            state=dict(type="str", choices=["plan", "resize"], default="plan"),
            access_token=dict(
                type="str", no_log=True, fallback=(env_fallback, ["GCP_ACCESS_TOKEN"])
            ),
            endpoint_url=dict(type="str", default=vg.GCE_API),
            wait_seconds=dict(type="int", default=300),
        ),
        supports_check_mode=True,
    )
    p = module.params
    for key in ("disk", "zone"):
        if not vg.GCE_NAME.match(p[key]):
            module.fail_json(
                msg=f"{p[key]!r} is not a GCE {key} name; names are lower-case letters, digits "
                "and dashes, starting with a letter."
            )
    if p["size_gb"] < 1:
        module.fail_json(msg="size_gb must be a positive number of GiB.")
    if not p["project"]:
        module.fail_json(msg="No GCP project: set volume_grow_gcp_project or GCP_PROJECT.")
    if not p["access_token"]:
        module.fail_json(
            msg="No GCP access token on the controller: export GCP_ACCESS_TOKEN (for example "
            "from gcloud auth print-access-token) before provisioning."
        )
    gce = vg.Gce(p["project"], p["zone"], p["access_token"], p["endpoint_url"])
    try:
        plan = vg.gce_plan(gce, p["disk"], p["size_gb"])
        changed = p["state"] == "resize" and plan["needs_grow"]
        if changed and not module.check_mode:
            vg.gce_resize(gce, p["disk"], p["size_gb"], p["wait_seconds"])
    except vg.GrowError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=changed, **plan)


if __name__ == "__main__":
    main()
