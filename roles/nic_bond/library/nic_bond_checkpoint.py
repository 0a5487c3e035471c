#!/usr/bin/python
"""Drive NetworkManager's checkpoints over D-Bus so a network change undoes itself unless confirmed."""

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
  state: {type: str, required: true, choices: [create, destroy, rollback]}
  checkpoint: {type: str, description: Checkpoint object path (all states but create).}
  rollback_timeout: {type: int, default: 120, description: Seconds before the automatic rollback.}
"""

import json

from ansible.module_utils.basic import AnsibleModule

NM = "org.freedesktop.NetworkManager"
NM_PATH = "/org/freedesktop/NetworkManager"
DELETE_NEW_CONNECTIONS = 0x02
DISCONNECT_NEW_DEVICES = 0x04
ROLLBACK_RESULTS = {0: "restored", 1: "gone", 2: "unmanaged", 3: "failed"}


def busctl(module, args):
    rc, out, err = module.run_command(["busctl", "--system", "--json=short"] + args)
    if rc != 0:
        module.fail_json(msg="NetworkManager refused `%s`: %s" % (" ".join(args[:4]), err.strip()))
    return json.loads(out)["data"] if out.strip() else None


def call(module, method, signature, *values):
    args = ["call", NM, NM_PATH, NM, method, signature] + [str(v) for v in values]
    return busctl(module, args)


def prop(module, path, interface, name):
    return busctl(module, ["get-property", NM, path, interface, name])


def checkpoints(module):
    return prop(module, NM_PATH, NM, "Checkpoints")


def interface_of(module, device_path):
    return prop(module, device_path, NM + ".Device", "Interface")


def create(module, timeout):
    existing = checkpoints(module)
    if existing:
        module.fail_json(msg="NetworkManager already holds checkpoint %s (another change is being "
                             "confirmed); wait for it to be committed or rolled back (at most its "
                             "rollback timeout) and run again." % ", ".join(existing))
    flags = DELETE_NEW_CONNECTIONS | DISCONNECT_NEW_DEVICES
    path = call(module, "CheckpointCreate", "aouu", 0, timeout, flags)[0]
    devices = prop(module, path, NM + ".Checkpoint", "Devices")
    module.exit_json(changed=True, checkpoint=path, rollback_timeout=timeout,
                     devices=sorted(interface_of(module, d) for d in devices))


def rollback(module, path):
    if path not in checkpoints(module):
        module.exit_json(changed=True, checkpoint=path, by="timeout", devices={},
                         msg="NetworkManager had already rolled back on its timeout.")
    devices = {d: interface_of(module, d) for d in prop(module, path, NM + ".Checkpoint",
                                                       "Devices")}
    results = call(module, "CheckpointRollback", "o", path)[0]
    outcome = {devices.get(d, d): ROLLBACK_RESULTS.get(code, str(code))
               for d, code in results.items()}
    module.exit_json(changed=True, checkpoint=path, by="request", devices=outcome,
                     msg="NetworkManager rolled back on request.")


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "required": True,
                      "choices": ["create", "destroy", "rollback"]},
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
        module.fail_json(msg="Checkpoint %s no longer exists: NetworkManager rolled the change back "
                             "because it was not confirmed within the rollback timeout." % path)
    call(module, "CheckpointDestroy", "o", path)
    module.exit_json(changed=True, checkpoint=path)


if __name__ == "__main__":
    main()
