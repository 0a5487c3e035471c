"""Seconds per Ansible task on a lab node: ansible-core with pipelining vs. the mitogen strategy.

Under TCG every module run starts a Python interpreter in the guest, which costs seconds;
mitogen keeps one interpreter alive. This measures whether offering mitogen is worth it.
Starts a one-node lab in a scratch directory and removes it afterwards. Last line: JSON.

    .venv/bin/python benchmarks/lab_ansible.py [--tasks 10] [--runs 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nodeprep.lab import lifecycle
from nodeprep.lab.inventory import render_ini
from nodeprep.lab.paths import cache_dir

TASK = """    - name: Run a trivial command.
      ansible.builtin.command: "true"
      changed_when: false
"""


def playbook(tasks: int) -> str:
    return "- hosts: all\n  gather_facts: false\n  tasks:\n" + TASK * tasks


def seconds_per_task(inventory: Path, book: Path, tasks: int, env: dict[str, str]) -> float:
    ansible_playbook = Path(sys.executable).with_name("ansible-playbook")
    started = time.monotonic()
    subprocess.run(
        [str(ansible_playbook), "-i", str(inventory), str(book)],
        env=env, check=True, capture_output=True, timeout=1800,
    )  # fmt: skip
    return (time.monotonic() - started) / tasks


def strategies() -> dict[str, dict[str, str]]:
    """Environment per strategy; mitogen only when it is installed."""
    base = {**os.environ, "ANSIBLE_PIPELINING": "True", "ANSIBLE_HOST_KEY_CHECKING": "False"}
    found = {"linear": base}
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is not None and spec.origin is not None:
        plugins = Path(spec.origin).parent / "plugins" / "strategy"
        found["mitogen"] = {
            **base, "ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear",
        }  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="nodeprep-bench-") as scratch:
        lab = Path(scratch) / "lab"
        try:
            state = lifecycle.up(lifecycle.UpRequest(nodes=1), lab, cache_dir())
            inventory = Path(scratch) / "lab.ini"
            inventory.write_text(render_ini(state))
            book = Path(scratch) / "tasks.yml"
            book.write_text(playbook(args.tasks))
            envs = strategies()
            figures: dict[str, list[float]] = {name: [] for name in envs}
            for _ in range(args.runs):  # interleaved, so both see the same machine load
                for name, env in envs.items():
                    figures[name].append(seconds_per_task(inventory, book, args.tasks, env))
            for name, values in figures.items():
                results[f"task_s_{name}"] = round(statistics.median(values), 2)
                print(f"{name}: {', '.join(f'{v:.2f}' for v in values)} s per task")
        finally:
            lifecycle.down(lab)
    results["accel"] = state.accel
    print(json.dumps(results))


if __name__ == "__main__":
    main()
