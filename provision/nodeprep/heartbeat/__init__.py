"""The node-side watchdog: probes, per-probe hysteresis, actions, GPU health, metrics.

It runs as ``python -m nodeprep.heartbeat --config FILE`` under systemd and imports only
the standard library, :mod:`nodeprep.contract` and (optionally) ``pynvml``; it never
imports torch, Ansible or any controller-side module, so it installs on a bare node.
"""

from __future__ import annotations
