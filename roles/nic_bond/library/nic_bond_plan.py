#!/usr/bin/python
"""Resolve the bond's members on the node and refuse members that carry the node's lifeline."""

from __future__ import annotations

DOCUMENTATION = r"""
module: nic_bond_plan
short_description: Resolve bond members and refuse ones that carry management or the default route.
description:
  - Resolves each member, given as an interface name or a MAC address, to the interface name
    the kernel uses now.
  - Finds the interface the controller's SSH session arrives on (from C(SSH_CONNECTION), so
    run it without become) and the interfaces that carry a default route. A member that is
    one of them, or a port of a bond that is, carries the node's lifeline: the module fails
    with an explanation unless I(allow_disruption) is true.
  - Reads the bond's live state from C(/proc/net/bonding) and the existing profile names.
    Reads only; never changes the node.
options:
  bond: {type: str, required: true, description: The bond's interface name.}
  members: {type: list, elements: str, required: true, description: Names or MACs.}
  primary: {type: str, default: "", description: Preferred member (name or MAC), resolved too.}
  allow_disruption: {type: bool, default: false, description: Proceed despite a lifeline member.}
  resolve_only:
    type: bool
    default: false
    description: Only resolve the members (every unknown one named); needs no NetworkManager.
"""

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule

MAC = re.compile(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$", re.IGNORECASE)
SYS_NET = "/sys/class/net"


def read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def interfaces():
    """Interface name -> permanent MAC (a bond port shows the bond's MAC in `address`)."""
    found = {}
    for name in sorted(os.listdir(SYS_NET)):
        found[name] = read(os.path.join(SYS_NET, name, "bonding_slave", "perm_hwaddr")) or read(
            os.path.join(SYS_NET, name, "address")
        )
    return found


def resolve(module, members):
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
        module.fail_json(msg="nic_bond_members names %s, which this node does not have (it has: %s); "
                             "fix the names (`ip link` lists them) or give MAC addresses."
                             % (", ".join(unknown), ", ".join(sorted(known))))
    if len(set(resolved)) != len(resolved):
        module.fail_json(msg="nic_bond_members names one interface twice (%s); list each NIC once."
                             % ", ".join(resolved))
    return resolved


def ip_json(module, args):
    rc, out, err = module.run_command(["ip", "-j"] + args)
    if rc != 0:
        module.fail_json(msg="`ip %s` failed: %s" % (" ".join(args), err.strip()))
    return json.loads(out or "[]")


def management_device(module):
    """The interface the controller's SSH session reaches this node through, if any."""
    parts = os.environ.get("SSH_CONNECTION", "").split()
    if len(parts) != 4:
        return None, None
    routes = ip_json(module, ["route", "get", parts[0]])
    return (routes[0].get("dev") if routes else None), parts[0]


def default_route_devices(module):
    devices = set()
    for family in ("-4", "-6"):
        for route in ip_json(module, [family, "route", "show", "default"]):
            if route.get("dev"):
                devices.add(route["dev"])
    return sorted(devices)


def master(name):
    link = os.path.join(SYS_NET, name, "master")
    return os.path.basename(os.path.realpath(link)) if os.path.islink(link) else None


def lifeline_reasons(member, mgmt_dev, client, route_devs):
    carried = {member, master(member)} - {None}
    reasons = []
    if mgmt_dev in carried:
        reasons.append("the management connection (SSH from %s arrives on %s)" % (client, mgmt_dev))
    for dev in route_devs:
        if dev in carried:
            reasons.append("the default route (via %s)" % dev)
    return reasons


def live_bond(bond):
    """Mode, MII interval, ports and active port as the kernel reports them now."""
    text = read("/proc/net/bonding/%s" % bond)
    if not text:
        return {"exists": False, "members": []}
    mode = re.search(r"^Bonding Mode: (.*)$", text, re.MULTILINE)
    active = re.search(r"^Currently Active Slave: (\S+)", text, re.MULTILINE)
    return {
        "exists": True,
        "mode": mode.group(1) if mode else None,
        "members": re.findall(r"^Slave Interface: (\S+)", text, re.MULTILINE),
        "active": active.group(1) if active else None,
    }


def profile_names(module):
    """NetworkManager's profile names (nmcli -g escapes ':' in names; ours have none)."""
    rc, out, err = module.run_command(["nmcli", "-g", "NAME", "connection", "show"])
    if rc != 0:
        module.fail_json(msg="NetworkManager does not answer (`nmcli connection show`: %s); "
                             "nic_bond needs NetworkManager running on the node." % err.strip())
    return [line for line in out.splitlines() if line]


def main():
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
        module.fail_json(msg="nic_bond_primary %s is not one of nic_bond_members (%s); name one "
                             "of them." % (primary, ", ".join(module.params["members"])))
    primary = members[module.params["members"].index(primary)] if primary else ""
    if bond in members:
        module.fail_json(msg="nic_bond_members lists the bond %s itself; list its NICs." % bond)
    mgmt_dev, client = management_device(module)
    route_devs = default_route_devices(module)
    lifelines = {}
    for member in members:
        reasons = lifeline_reasons(member, mgmt_dev, client, route_devs)
        if reasons:
            lifelines[member] = reasons
    if lifelines and not module.params["allow_disruption"]:
        said = "; ".join("%s carries %s" % (m, " and ".join(r)) for m, r in lifelines.items())
        module.fail_json(msg="Refusing to bond %s into %s: %s, so the change could cut this node "
                             "off. Choose other members, or set nic_bond_allow_disruption: true to "
                             "apply it inside a NetworkManager checkpoint that rolls back when the "
                             "node stops answering." % (", ".join(lifelines), bond, said))
    module.exit_json(changed=False, members=members, primary=primary, management_device=mgmt_dev,
                     default_route_devices=route_devs, lifelines=lifelines,
                     disruptive=bool(lifelines), live=live_bond(bond),
                     profiles=profile_names(module))


if __name__ == "__main__":
    main()
