#!/usr/bin/python
"""Set how a bond watches its members: MII (carrier) polling, or ARP probes of its peers."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nic_bond_monitor
short_description: Set a bond profile's link monitoring (MII or ARP) in NetworkManager.
description:
  - MII monitoring (C(miimon)) watches each member's carrier only, so a member whose link
    stays up while its traffic is lost (a dead switch port, a blackholed path) stays active.
    ARP monitoring (C(arp_interval), C(arp_ip_target)) sends ARP requests to peers through
    the active member and counts a member up only while it receives traffic, which catches
    that case; C(arp_validate) decides which received traffic counts.
  - The kernel runs one of the two. With I(arp_interval) above 0 the module sets C(miimon=0)
    and the ARP options; with 0 it sets C(miimon) and removes the ARP options.
  - C(community.general.nmcli) has no C(arp_validate) and does not compare the ARP options
    it sets with the profile's C(bond.options) (it reports a change on every run), so this
    module reads C(bond.options) itself and changes only the keys that differ, in one
    C(nmcli connection modify), so NetworkManager never sees both monitors set.
  - With I(mode), the bonding mode is set in the same command, since NetworkManager refuses
    some modes with ARP monitoring (balance-tlb, balance-alb, 802.3ad) and a change of both
    must happen at once.
  - Changes the profile only; the role activates it inside its checkpoint.
options:
  bond:
    description: The bond's NetworkManager profile (the role names it after the bond).
    type: str
    required: true
  mode:
    description: The bonding mode to set with the monitoring; empty leaves it as it is.
    type: str
    default: ""
  miimon:
    description: MII polling interval in milliseconds, used when I(arp_interval) is 0.
    type: int
    default: 100
  arp_interval:
    description: ARP monitoring interval in milliseconds; 0 for MII monitoring.
    type: int
    default: 0
  arp_ip_targets:
    description: The addresses the bond probes with ARP (at least one with I(arp_interval)).
    type: list
    elements: str
    default: []
  arp_validate:
    description: Which received traffic counts for a member (the kernel's C(arp_validate)).
    type: str
    default: all
    choices: [none, active, backup, all, filter, filter_active, filter_backup]
notes:
  - Supports check mode (reports what it would change).
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Probe the segment's peer with ARP every 100 ms.
  nodeprep.hardening.nic_bond_monitor:
    bond: bond0
    arp_interval: 100
    arp_ip_targets: [10.77.0.2]
  become: true
"""

RETURN = r"""
before:
  description: The monitoring keys of the profile's C(bond.options) before the change.
  returned: always
  type: dict
changes:
  description: The C(nmcli connection modify) arguments run (or, in check mode, due).
  returned: always
  type: list
  elements: str
"""

import re
from typing import Any

from ansible.module_utils.basic import AnsibleModule

KEYS = ("mode", "miimon", "arp_interval", "arp_ip_target", "arp_validate")
# What the kernel and NetworkManager take for an option left out.
_UNSET = {"mode": {""}, "miimon": {"", "0"}, "arp_interval": {"", "0"}, "arp_ip_target": {""},
          "arp_validate": {"", "0", "none"}}  # fmt: skip


def parse_options(text: str) -> dict[str, str]:
    """`nmcli -g bond.options` output as a dict: key=value pairs, a comma inside a value
    escaped with a backslash (NetworkManager shows several ARP targets space-separated)."""
    options: dict[str, str] = {}
    for part in re.split(r"(?<!\\),", text.strip()):
        key, sep, value = part.partition("=")
        if sep:
            options[key.strip()] = value.replace("\\,", ",").strip()
    return options


def wanted(
    miimon: int, arp_interval: int, targets: list[str], validate: str, mode: str = ""
) -> dict[str, str]:
    """The monitoring keys the profile must have ("" for a key that must be unset; a MODE of
    "" is left as it is)."""
    if arp_interval > 0:
        return {"mode": mode, "miimon": "", "arp_interval": str(arp_interval),
                "arp_ip_target": " ".join(targets), "arp_validate": validate}  # fmt: skip
    return {"mode": mode, "miimon": str(miimon), "arp_interval": "", "arp_ip_target": "",
            "arp_validate": ""}  # fmt: skip


def _words(value: str) -> list[str]:
    return sorted(re.split(r"[\s,]+", value.strip())) if value.strip() else []


def changes(current: dict[str, str], want: dict[str, str]) -> list[str]:
    """The `nmcli connection modify` arguments that take CURRENT to WANT: removals first,
    then settings, so that the profile never holds both monitors once it is verified."""
    removals: list[str] = []
    settings: list[str] = []
    for key in KEYS:
        have, need = current.get(key, ""), want[key]
        if key == "mode" and need == "":
            continue
        if need == "":
            if have not in _UNSET[key]:
                removals += ["-bond.options", key]
        elif _words(have) != _words(need):
            # nmcli takes several targets comma-separated, the comma escaped from its list.
            settings += ["+bond.options", key + "=" + "\\,".join(need.split())]
    return removals + settings


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "bond": {"type": "str", "required": True},
            "mode": {"type": "str", "default": ""},
            "miimon": {"type": "int", "default": 100},
            "arp_interval": {"type": "int", "default": 0},
            "arp_ip_targets": {"type": "list", "elements": "str", "default": []},
            "arp_validate": {
                "type": "str",
                "default": "all",
                "choices": [
                    "none",
                    "active",
                    "backup",
                    "all",
                    "filter",
                    "filter_active",
                    "filter_backup",
                ],
            },
        },
        supports_check_mode=True,
    )
    params: dict[str, Any] = module.params
    bond = params["bond"]
    if params["arp_interval"] > 0 and not params["arp_ip_targets"]:
        module.fail_json(msg=f"ARP monitoring of {bond} needs at least one arp_ip_target.")
    rc, out, err = module.run_command(["nmcli", "-g", "bond.options", "connection", "show", bond])
    if rc != 0:
        if module.check_mode:  # the profile is created by the run this previews
            module.exit_json(changed=True, before={}, changes=["(the profile is new)"])
        module.fail_json(msg=f"nmcli cannot read the profile {bond}: {err.strip() or out}")
    current = parse_options(out)
    want = wanted(params["miimon"], params["arp_interval"], params["arp_ip_targets"],
                  params["arp_validate"], params["mode"])  # fmt: skip
    todo = changes(current, want)
    before = {key: current[key] for key in KEYS if key in current}
    if todo and not module.check_mode:
        rc, out, err = module.run_command(["nmcli", "connection", "modify", bond, *todo])
        if rc != 0:
            module.fail_json(msg=f"nmcli could not set the link monitoring of {bond} "
                             f"({' '.join(todo)}): {err.strip() or out.strip()}")  # fmt: skip
    module.exit_json(changed=bool(todo), before=before, changes=todo)


if __name__ == "__main__":
    main()
