#!/usr/bin/python
"""Resolve the bond's members on the node and refuse members that carry the node's lifeline."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nic_bond_plan
short_description: Resolve bond members and refuse ones that carry management or the default route.
description:
  - Resolves each member, given as an interface name or a MAC address, to the interface name
    the kernel uses now. Every unknown name or MAC is named in one failure, and a list that
    names the same interface twice is refused.
  - Finds the interface the controller's SSH session arrives on (from C(SSH_CONNECTION), so
    run it without become) and the interfaces that carry a default route. A member that is
    one of them, or a port of a bond that is, carries the node's lifeline. The module then
    fails with an explanation unless I(allow_disruption) is true.
  - Reads the bond's live state from C(/proc/net/bonding) and the existing profile names.
    Reads only; never changes the node.
options:
  bond:
    description: Interface name of the bond, for example C(bond0). It may not be a member.
    type: str
    required: true
  members:
    description:
      - The NICs to put into the bond, each as an interface name or a MAC address.
      - A NIC that is already a bond port is matched by its permanent MAC, not by the
        bond's MAC that it shows while enslaved.
    type: list
    elements: str
    required: true
  primary:
    description:
      - The member that should carry traffic when its link is up, written exactly as it
        appears in I(members) (name or MAC). It is resolved to an interface name like the
        members. Empty means no primary.
    type: str
    default: ""
  allow_disruption:
    description:
      - Go on even when a member carries the management connection or a default route,
        instead of failing. The lifeline members are still reported in RV(lifelines).
    type: bool
    default: false
  resolve_only:
    description:
      - Only resolve the members and return them; skip the primary, lifeline, bond and
        profile lookups. Needs no NetworkManager on the node.
    type: bool
    default: false
notes:
  - Supports check mode; the module never changes anything.
  - Without I(resolve_only), NetworkManager must be running (C(nmcli) is asked for the
    profile names).
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Check that every bond member exists on the node.
  nodeprep.hardening.nic_bond_plan:
    bond: bond0
    members: [enp1s0, "52:54:00:12:34:56"]
    resolve_only: true
  become: false

- name: Plan the bond and refuse members the node cannot afford to lose.
  nodeprep.hardening.nic_bond_plan:
    bond: bond0
    members: [enp1s0, enp2s0]
    primary: enp1s0
    allow_disruption: false
  register: bond_plan
  become: false
"""

RETURN = r"""
members:
  description: Kernel interface names of the members, in the order they were given.
  returned: always
  type: list
  elements: str
  sample: [enp1s0, enp2s0]
primary:
  description: Kernel interface name of the primary member, or an empty string when none.
  returned: unless I(resolve_only) is true
  type: str
  sample: enp1s0
management_device:
  description:
    - Interface that the controller's SSH session reaches the node through; null when
      C(SSH_CONNECTION) is not set.
  returned: unless I(resolve_only) is true
  type: str
  sample: enp1s0
default_route_devices:
  description: Sorted interface names that carry an IPv4 or IPv6 default route.
  returned: unless I(resolve_only) is true
  type: list
  elements: str
  sample: [enp1s0]
lifelines:
  description:
    - Members that carry the management connection or a default route, each mapped to the
      reasons in words. Empty when no member does.
  returned: unless I(resolve_only) is true
  type: dict
  sample: {enp1s0: ["the default route (via enp1s0)"]}
disruptive:
  description: Whether any member is a lifeline, so that the change could cut the node off.
  returned: unless I(resolve_only) is true
  type: bool
  sample: false
live:
  description: The bond as the kernel reports it now in C(/proc/net/bonding).
  returned: unless I(resolve_only) is true
  type: dict
  contains:
    exists:
      description: Whether the kernel has a bond of that name.
      type: bool
    members:
      description: The bond's port interfaces; empty when the bond does not exist.
      type: list
      elements: str
    mode:
      description: The bonding mode as the kernel words it. Only when the bond exists.
      type: str
    active:
      description: The currently active port, or null. Only when the bond exists.
      type: str
  sample:
    exists: true
    mode: fault-tolerance (active-backup)
    members: [enp1s0, enp2s0]
    active: enp1s0
profiles:
  description: Names of all NetworkManager connection profiles on the node.
  returned: unless I(resolve_only) is true
  type: list
  elements: str
  sample: [bond0, bond0-port-enp1s0, bond0-port-enp2s0]
"""

import json
import os
import re
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.nodeprep.hardening.plugins.module_utils import bonding

MAC = re.compile(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$", re.IGNORECASE)
SYS_NET = "/sys/class/net"


def read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def interfaces() -> dict[str, str]:
    """Interface name -> permanent MAC (a bond port shows the bond's MAC in `address`)."""
    found: dict[str, str] = {}
    for name in sorted(os.listdir(SYS_NET)):
        found[name] = read(os.path.join(SYS_NET, name, "bonding_slave", "perm_hwaddr")) or read(
            os.path.join(SYS_NET, name, "address")
        )
    return found


def resolve(module: AnsibleModule, members: list[str]) -> list[str]:
    """Kernel names of the members; every unknown name or MAC is named in one failure."""
    known = interfaces()
    resolved = []
    unknown = []
    for member in members:
        if MAC.match(member):
            names = [name for name, mac in known.items() if mac.lower() == member.lower()]
            if names:
                resolved.append(names[0])
            else:
                unknown.append(member)
        elif member in known:
            resolved.append(member)
        else:
            unknown.append(member)
    if unknown:
        module.fail_json(
            msg="nic_bond_members names {}, which this node does not have (it has: {}); "
            "fix the names (`ip link` lists them) or give MAC addresses.".format(
                ", ".join(unknown), ", ".join(sorted(known))
            )
        )
    if len(set(resolved)) != len(resolved):
        module.fail_json(
            msg="nic_bond_members names one interface twice ({}); list each NIC once.".format(
                ", ".join(resolved)
            )
        )
    return resolved


def ip_json(module: AnsibleModule, args: list[str]) -> Any:
    rc, out, err = module.run_command(["ip", "-j", *args])
    if rc != 0:
        module.fail_json(msg="`ip {}` failed: {}".format(" ".join(args), err.strip()))
    return json.loads(out or "[]")


def management_device(module: AnsibleModule) -> tuple[str | None, str | None]:
    """The interface the controller's SSH session reaches this node through, if any."""
    parts = os.environ.get("SSH_CONNECTION", "").split()
    if len(parts) != 4:
        return None, None
    routes = ip_json(module, ["route", "get", parts[0]])
    return (routes[0].get("dev") if routes else None), parts[0]


def default_route_devices(module: AnsibleModule) -> list[str]:
    devices: set[str] = set()
    for family in ("-4", "-6"):
        for route in ip_json(module, [family, "route", "show", "default"]):
            if route.get("dev"):
                devices.add(route["dev"])
    return sorted(devices)


def master(name: str) -> str | None:
    link = os.path.join(SYS_NET, name, "master")
    return os.path.basename(os.path.realpath(link)) if os.path.islink(link) else None


def lifeline_reasons(
    member: str, mgmt_dev: str | None, client: str | None, route_devs: list[str]
) -> list[str]:
    carried = {member, master(member)} - {None}
    reasons = []
    if mgmt_dev in carried:
        reasons.append(f"the management connection (SSH from {client} arrives on {mgmt_dev})")
    for dev in route_devs:
        if dev in carried:
            reasons.append(f"the default route (via {dev})")
    return reasons


def live_bond(bond: str) -> dict[str, Any]:
    """Mode, MII interval, members (and which are up) and the active one, as the kernel says."""
    return bonding.parse(read(f"/proc/net/bonding/{bond}"))


def profile_names(module: AnsibleModule) -> list[str]:
    """NetworkManager's profile names (nmcli -g escapes ':' in names; ours have none)."""
    rc, out, err = module.run_command(["nmcli", "-g", "NAME", "connection", "show"])
    if rc != 0:
        module.fail_json(
            msg=f"NetworkManager does not answer (`nmcli connection show`: {err.strip()}); "
            "nic_bond needs NetworkManager running on the node."
        )
    return [line for line in out.splitlines() if line]


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "bond": {"type": "str", "required": True},
            "members": {"type": "list", "elements": "str", "required": True},
            "primary": {"type": "str", "default": ""},
            "allow_disruption": {"type": "bool", "default": False},
            "resolve_only": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    bond, primary = module.params["bond"], module.params["primary"]
    members = resolve(module, module.params["members"])
    if module.params["resolve_only"]:
        module.exit_json(changed=False, members=members)
    if primary and primary not in module.params["members"]:
        module.fail_json(
            msg="nic_bond_primary {} is not one of nic_bond_members ({}); name one of them.".format(
                primary, ", ".join(module.params["members"])
            )
        )
    primary = members[module.params["members"].index(primary)] if primary else ""
    if bond in members:
        module.fail_json(msg=f"nic_bond_members lists the bond {bond} itself; list its NICs.")
    mgmt_dev, client = management_device(module)
    route_devs = default_route_devices(module)
    lifelines: dict[str, list[str]] = {}
    for member in members:
        reasons = lifeline_reasons(member, mgmt_dev, client, route_devs)
        if reasons:
            lifelines[member] = reasons
    if lifelines and not module.params["allow_disruption"]:
        said = "; ".join("{} carries {}".format(m, " and ".join(r)) for m, r in lifelines.items())
        module.fail_json(
            msg="Refusing to bond {} into {}: {}, so the change could cut this node "
            "off. Choose other members, or set nic_bond_allow_disruption: true to "
            "apply it inside a NetworkManager checkpoint that rolls back when the "
            "node stops answering.".format(", ".join(lifelines), bond, said)
        )
    module.exit_json(
        changed=False,
        members=members,
        primary=primary,
        management_device=mgmt_dev,
        default_route_devices=route_devs,
        lifelines=lifelines,
        disruptive=bool(lifelines),
        live=live_bond(bond),
        profiles=profile_names(module),
    )


if __name__ == "__main__":
    main()
