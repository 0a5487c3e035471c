#!/usr/bin/python
"""Drive NetworkManager checkpoints over D-Bus: a network change undoes itself unless confirmed."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nic_bond_checkpoint
short_description: Create, commit or roll back a NetworkManager checkpoint.
description:
  - C(create) snapshots every device's configuration (CheckpointCreate with no devices) with
    a rollback timeout; NetworkManager itself restores the snapshot when the timeout expires,
    so the node recovers even when the controller can no longer reach it. The snapshot is
    taken with the flags that delete connections and disconnect devices created after it, so
    a rollback also removes a new bond and its port profiles.
  - The role's activation job restarts the timeout when it starts (CheckpointAdjustRollbackTimeout
    through busctl), so the proof window begins with the activation itself.
  - C(destroy) commits the change (CheckpointDestroy).
  - C(rollback) restores the snapshot now (CheckpointRollback) when it still exists, or
    reports that NetworkManager already did so on its timeout.
  - Talks to NetworkManager with busctl (systemd), so the node needs no Python D-Bus binding.
options:
  state:
    description:
      - C(create) takes a new checkpoint and fails when NetworkManager already holds one.
      - C(destroy) commits the change by deleting the checkpoint; it fails when the
        checkpoint is gone, because that means NetworkManager has already rolled back.
      - C(rollback) restores the checkpoint now, or reports that the timeout already did.
    type: str
    required: true
    choices: [create, destroy, rollback]
  checkpoint:
    description:
      - D-Bus object path of the checkpoint, as returned by I(state=create).
      - Required with I(state=destroy) and I(state=rollback); not used by I(state=create).
    type: str
  rollback_timeout:
    description:
      - Seconds after which NetworkManager restores the checkpoint on its own unless it has
        been destroyed. Only used with I(state=create).
    type: int
    default: 120
notes:
  - Needs a running NetworkManager on the node; the nic_bond role calls it with become.
  - Check mode is not supported; every state acts on NetworkManager.
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Take a checkpoint that NetworkManager restores unless it is committed in time.
  nodeprep.hardening.nic_bond_checkpoint:
    state: create
    rollback_timeout: 120
  register: checkpoint
  become: true

- name: Commit the network change once the node still answers.
  nodeprep.hardening.nic_bond_checkpoint:
    state: destroy
    checkpoint: "{{ checkpoint.checkpoint }}"
  become: true
"""

RETURN = r"""
checkpoint:
  description: D-Bus object path of the checkpoint that was created, committed or rolled back.
  returned: always
  type: str
  sample: /org/freedesktop/NetworkManager/Checkpoint/3
rollback_timeout:
  description: Seconds NetworkManager waits before it restores the checkpoint on its own.
  returned: when I(state=create)
  type: int
  sample: 120
devices:
  description:
    - With I(state=create), the sorted list of interface names the checkpoint covers.
    - With I(state=rollback), a mapping of interface name to the outcome NetworkManager
      reported for it (C(restored), C(gone), C(unmanaged) or C(failed)); empty when the
      timeout had already rolled the change back.
  returned: when I(state=create) or I(state=rollback)
  type: raw
  sample: {bond0: restored, enp1s0: restored, enp2s0: restored}
by:
  description:
    - What rolled the change back. C(request) when this task restored the checkpoint,
      C(timeout) when NetworkManager had already done so because the checkpoint expired.
  returned: when I(state=rollback)
  type: str
  sample: request
msg:
  description: One sentence saying how the rollback happened.
  returned: when I(state=rollback)
  type: str
  sample: NetworkManager rolled back on request.
"""

import json
from typing import Any

from ansible.module_utils.basic import AnsibleModule

NM = "org.freedesktop.NetworkManager"
NM_PATH = "/org/freedesktop/NetworkManager"
DELETE_NEW_CONNECTIONS = 0x02
DISCONNECT_NEW_DEVICES = 0x04
ROLLBACK_RESULTS = {0: "restored", 1: "gone", 2: "unmanaged", 3: "failed"}


def busctl(module: AnsibleModule, args: list[str]) -> Any:
    rc, out, err = module.run_command(["busctl", "--system", "--json=short", *args])
    if rc != 0:
        module.fail_json(
            msg="NetworkManager refused `{}`: {}".format(" ".join(args[:4]), err.strip())
        )
    return json.loads(out)["data"] if out.strip() else None


def call(module: AnsibleModule, method: str, signature: str, *values: object) -> Any:
    args = ["call", NM, NM_PATH, NM, method, signature] + [str(v) for v in values]
    return busctl(module, args)


def prop(module: AnsibleModule, path: str, interface: str, name: str) -> Any:
    return busctl(module, ["get-property", NM, path, interface, name])


def checkpoints(module: AnsibleModule) -> Any:
    return prop(module, NM_PATH, NM, "Checkpoints")


def interface_of(module: AnsibleModule, device_path: str) -> Any:
    return prop(module, device_path, NM + ".Device", "Interface")


def create(module: AnsibleModule, timeout: int) -> None:
    existing = checkpoints(module)
    if existing:
        module.fail_json(
            msg="NetworkManager already holds checkpoint {} (another change is being "
            "confirmed); wait for it to be committed or rolled back (at most its "
            "rollback timeout) and run again.".format(", ".join(existing))
        )
    flags = DELETE_NEW_CONNECTIONS | DISCONNECT_NEW_DEVICES
    path = call(module, "CheckpointCreate", "aouu", 0, timeout, flags)[0]
    devices = prop(module, path, NM + ".Checkpoint", "Devices")
    module.exit_json(
        changed=True,
        checkpoint=path,
        rollback_timeout=timeout,
        devices=sorted(interface_of(module, d) for d in devices),
    )


def rollback(module: AnsibleModule, path: str) -> None:
    if path not in checkpoints(module):
        module.exit_json(
            changed=True,
            checkpoint=path,
            by="timeout",
            devices={},
            msg="NetworkManager had already rolled back on its timeout.",
        )
    devices = {
        d: interface_of(module, d) for d in prop(module, path, NM + ".Checkpoint", "Devices")
    }
    results = call(module, "CheckpointRollback", "o", path)[0]
    outcome = {
        devices.get(d, d): ROLLBACK_RESULTS.get(code, str(code)) for d, code in results.items()
    }
    module.exit_json(
        changed=True,
        checkpoint=path,
        by="request",
        devices=outcome,
        msg="NetworkManager rolled back on request.",
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {
                "type": "str",
                "required": True,
                "choices": ["create", "destroy", "rollback"],
            },
            "checkpoint": {"type": "str"},
            "rollback_timeout": {"type": "int", "default": 120},
        },
        required_if=[("state", s, ["checkpoint"]) for s in ("destroy", "rollback")],
        supports_check_mode=False,
    )
    state, path = module.params["state"], module.params["checkpoint"]
    if state == "create":
        create(module, module.params["rollback_timeout"])
    if state == "rollback":
        rollback(module, path)
    if path not in checkpoints(module):
        module.fail_json(
            msg=f"Checkpoint {path} no longer exists: NetworkManager rolled the change back "
            "because it was not confirmed within the rollback timeout."
        )
    call(module, "CheckpointDestroy", "o", path)
    module.exit_json(changed=True, checkpoint=path)


if __name__ == "__main__":
    main()
