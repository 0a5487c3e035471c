#!/usr/bin/python
"""Validate a rendered heartbeat config: documentation only.

The check runs on the controller, in plugins/action/heartbeat_config_check.py.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: heartbeat_config_check
short_description: Validate the heartbeat daemon's config on the controller before a node changes.
description:
  - Runs on the controller, with no connection to the node (an action plugin).
  - Parses the rendered config with the daemon's own validator (C(nodeprep.heartbeat.config))
    so that an unknown probe type or a bad action fails before a service user, a venv or a
    unit is created on the node.
  - Skips, with a message, where the nodeprep package is not importable on the controller;
    the node still validates the written file with the installed daemon.
options:
  config:
    description: The rendered config, as a JSON string or a mapping.
    type: raw
    required: true
author: nodeprep developers
"""

EXAMPLES = r"""
- name: Validate the probes and actions before anything changes on the node.
  nodeprep.hardening.heartbeat_config_check:
    config: "{{ lookup('ansible.builtin.template', 'heartbeat.json.j2') }}"
"""

RETURN = r"""
msg:
  description: C(valid), or one sentence naming the bad field and the variable to fix.
  returned: always
  type: str
  sample: >-
    heartbeat config: probes[0].type: unknown probe type 'ping'
    Fix heartbeat_probes or heartbeat_actions.
"""
