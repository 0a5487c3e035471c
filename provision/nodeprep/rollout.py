"""Rolling provision: which nodes each batch holds, and what a stopped rollout left alone.

playbooks/provision.yml runs the disruptive roles with `serial` and `max_fail_percentage`,
so Ansible stops the rollout at the first failing batch. This module plans the batches the
way Ansible does and reads the run back, so the summary can say which batch stopped the
rollout, why, and which nodes the disruptive roles never touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from nodeprep import paths
from nodeprep.runner import RunResult, TaskFailure

DEFAULT_SERIAL: tuple[int | str, ...] = (1, "10%", "100%")


class RolloutInputError(ValueError):
    """A batch list or canary that cannot be used; the message names the fix."""


def parse_serial(text: str) -> list[int | str]:
    """'1,10%,100%' -> [1, '10%', '100%']; each item a positive count or a percentage."""
    items: list[int | str] = []
    for raw in (part.strip() for part in text.split(",")):
        number = raw[:-1] if raw.endswith("%") else raw
        if not number.isdigit() or int(number) <= 0 or (raw.endswith("%") and int(number) > 100):
            raise RolloutInputError(
                f"--batches {text!r}: {raw!r} is not a node count or a percentage; "
                "write it like --batches 1,10%,100%."
            )
        items.append(raw if raw.endswith("%") else int(raw))
    return items


def _batch_size(item: int | str, total: int) -> int:
    """Ansible's rule: a percentage of all hosts, rounded down, at least one."""
    if isinstance(item, str):
        return int(int(item[:-1]) / 100.0 * total) or 1
    return item


def plan_batches(hosts: Sequence[str], serial: Sequence[int | str]) -> list[list[str]]:
    """Split hosts into batches as Ansible's `serial` does; the last size repeats."""
    remaining, batches, index = list(hosts), [], 0
    while remaining:
        size = _batch_size(serial[index], len(hosts)) if serial else len(remaining)
        batches.append(remaining[:size])
        remaining = remaining[size:]
        index = min(index + 1, len(serial) - 1) if serial else 0
    return batches


def order_hosts(hosts: Sequence[str], canary: str | None) -> list[str]:
    """The canary first, then the others in inventory order."""
    if not canary:
        return list(hosts)
    if canary not in hosts:
        raise RolloutInputError(
            f"--canary {canary!r} is not one of the selected hosts ({', '.join(hosts)}); "
            "name a host of the inventory (and of --limit)."
        )
    return [canary, *(host for host in hosts if host != canary)]


@dataclass(frozen=True)
class Rollout:
    """What the rolling play did: the batches run, where it stopped, who was left alone."""

    planned: list[list[str]]
    batches: list[list[str]]
    failures: list[TaskFailure]
    untouched: list[str]

    @property
    def stopped(self) -> bool:
        return bool(self.untouched) and bool(self.failures)


@cache
def rolling_play(playbook: Path | None = None) -> str:
    """The name of the play that batches (the one with ``serial``), read from the playbook.

    The playbook is the one place that names it; ansible-runner's events carry only names.
    """
    plays = yaml.safe_load((playbook or paths.playbook("provision.yml")).read_text())
    (name,) = [str(play["name"]) for play in plays if "serial" in play]
    return name


def read_rollout(result: RunResult, planned: list[list[str]]) -> Rollout | None:
    """The rolling play as it ran; None when it never started (e.g. tags skipped it)."""
    position = {host: index for index, host in enumerate(h for b in planned for h in b)}
    batches = [
        sorted(play.hosts, key=lambda host: position.get(host, len(position)))
        for play in result.plays
        if play.name == rolling_play()
    ]
    if not batches:
        return None
    touched = {host for batch in batches for host in batch}
    last = set(batches[-1])
    failures = [f for f in result.failures if f.host in last]
    untouched = [host for batch in planned for host in batch if host not in touched]
    return Rollout(planned, batches, failures, untouched)


def describe(rollout: Rollout) -> list[str]:
    """Summary lines for the terminal."""
    lines = [
        f"rollout batch {number}/{len(rollout.planned)}: {', '.join(batch) or '(no host)'}"
        for number, batch in enumerate(rollout.batches, start=1)
    ]
    if rollout.stopped:
        number = len(rollout.batches)
        first = rollout.failures[0]
        what = "the canary" if number == 1 else f"batch {number}"
        lines.append(
            f"rollout stopped at {what} ({', '.join(rollout.batches[-1])}): {first.host} "
            f"failed {first.task!r}: {first.message}"
        )
        lines.append(f"never touched by the disruptive roles: {', '.join(rollout.untouched)}")
    return lines
