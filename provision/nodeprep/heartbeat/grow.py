"""The growth action: ask for a volume to grow before its filesystem fills.

The daemon runs unprivileged (CAP_KILL only) and cannot grow a disk, so the work is split:

- Here, in the daemon: after every reading of a free_space probe whose filesystem has a
  ``grow`` entry, when the projected time until full is under ``when_s`` (or the disk is
  critical), write a request file into ``request_dir``. The request names the volume by its
  index in the config and nothing else; one request per volume is outstanding at a time.
- ``nodeprep.heartbeat.grow_helper``, as root: a systemd path unit starts it when a request
  appears. It reads every parameter (volume id, step, maximum, cooldown) from the same
  root-owned config file, never from the request, grows the volume through the code
  ``roles/volume_grow`` uses, and writes the outcome into ``state_dir`` (one JSON file per
  volume, and a log line).
- Back here: the outcome is logged and exported. A refusal (cooldown, maximum reached, no
  credentials, a failure) is said once, warns the trainers through the same path as a probe
  trip (an emergency checkpoint), and holds further requests until the refusal's time has come
  (the cooldown's end) or, for the maximum, until the daemon restarts with a new config.

When the disk is critical the action trips first (an emergency checkpoint while one still
fits) and asks for growth after.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeprep.data import files
from nodeprep.heartbeat.actions import Trip
from nodeprep.heartbeat.config import GrowConfig, GrowVolume
from nodeprep.heartbeat.free_space import DiskReading
from nodeprep.job import read_json

log = logging.getLogger(__name__)
# Outcomes the helper writes: grown, or why not.
GROWN, REFUSED, FAILED = "grown", "refused", "failed"
# Refusal kinds that hold further requests: until retry_at, or (maximum) for good.
MAXIMUM, COOLDOWN = "maximum", "cooldown"


def request_path(cfg: GrowConfig, index: int) -> Path:
    return Path(cfg.request_dir) / f"volume-{index}.request"


def result_path(cfg: GrowConfig, index: int) -> Path:
    return Path(cfg.state_dir) / f"volume-{index}.json"


def write_atomic(path: Path, document: dict[str, Any]) -> None:
    """Replace ``path`` with ``document`` as JSON, durably (nodeprep.data.files)."""
    files.atomic_write_text(path, json.dumps(document, indent=1, sort_keys=True))


@dataclass
class VolumeGrowth:
    """What the daemon knows about one growable volume."""

    index: int
    cfg: GrowVolume
    outstanding: str | None = None  # id of the request the helper has not answered yet
    requested_at: float = 0.0
    held_until: float = 0.0  # no request before this Unix time (inf: maximum reached)
    held_reason: str = ""
    said: set[str] = field(default_factory=set)  # refusals already said once
    grown_total: int = 0
    refused_total: int = 0
    size_gb: int | None = None
    last_grown_at: float | None = None
    next_possible_at: float | None = None


class GrowAction:
    """Decides when to ask for growth and takes in the helper's answers."""

    def __init__(
        self,
        cfg: GrowConfig,
        trip: Callable[[Trip], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg, self.trip, self.clock = cfg, trip, clock
        self.volumes = [VolumeGrowth(i, v) for i, v in enumerate(cfg.volumes)]

    def volume_for(self, path: str) -> VolumeGrowth | None:
        """The growable volume that holds ``path`` (same filesystem), if any; read at every
        reading, so a volume mounted (or unmounted) since is seen as it is now."""
        try:
            dev = os.stat(path).st_dev
        except OSError:
            return None
        for volume in self.volumes:
            try:
                if os.stat(volume.cfg.path).st_dev == dev:
                    return volume
            except OSError:
                continue
        return None

    def observe(self, probe: str, reading: DiskReading) -> None:
        """After a free_space reading: collect an answer, then ask for growth if it is due."""
        volume = self.volume_for(reading.path)
        if volume is None:
            return
        self.collect(volume, probe)
        if volume.outstanding is not None:
            return
        soon = reading.seconds_until_full is not None and reading.seconds_until_full < (
            volume.cfg.when_s
        )
        if not (soon or reading.level == "critical"):
            return
        now = self.clock()
        if now < volume.held_until:
            return
        if reading.level == "critical":  # an emergency checkpoint first, while one fits
            self.trip(Trip(f"{probe}:grow", f"{reading.path} is critical; checkpoint before "
                           "growing it", now))  # fmt: skip
        why = (
            f"{reading.path} is critical ({reading.free_bytes} bytes free)"
            if reading.level == "critical" and not soon
            else f"{reading.path} full in {reading.seconds_until_full or 0:.0f} s "
            f"(under {volume.cfg.when_s:g} s)"
        )
        volume.outstanding = uuid.uuid4().hex
        volume.requested_at = now
        try:
            write_atomic(
                request_path(self.cfg, volume.index),
                {"id": volume.outstanding, "volume": volume.index, "requested_at": now,
                 "reason": why},
            )  # fmt: skip
        except OSError as err:
            volume.outstanding = None
            self._refusal(volume, probe, f"cannot write the growth request: {err}", now + 60)
            return
        log.warning("action=grow_request volume=%s path=%s reason=%r",
                    volume.cfg.name, volume.cfg.path, why)  # fmt: skip

    def collect(self, volume: VolumeGrowth, probe: str) -> None:
        """Take in the helper's answer to the outstanding request, when it has come."""
        if volume.outstanding is None:
            return
        answer = read_json(str(result_path(self.cfg, volume.index)))
        if answer is None or answer.get("request_id") != volume.outstanding:
            if self.clock() - volume.requested_at > self.cfg.answer_timeout_s:
                volume.outstanding = None
                self._refusal(
                    volume,
                    probe,
                    f"no answer from the growth helper within {self.cfg.answer_timeout_s:g} s "
                    f"(is nodeprep-volume-grow.path active? see journalctl -u "
                    f"nodeprep-volume-grow.service)",
                    self.clock() + self.cfg.retry_s,
                )
            return
        volume.outstanding = None
        outcome, message = answer.get("outcome"), str(answer.get("message", ""))
        volume.size_gb = answer.get("size_gb", volume.size_gb)
        volume.next_possible_at = answer.get("next_possible_at")
        if outcome == GROWN:
            volume.grown_total += 1
            volume.last_grown_at = answer.get("finished_at")
            volume.held_until, volume.held_reason = 0.0, ""
            volume.said.clear()
            log.warning("action=grown volume=%s path=%s %s",
                        volume.cfg.name, volume.cfg.path, message)  # fmt: skip
            return
        kind = answer.get("kind")
        if kind == MAXIMUM:
            until = float("inf")
        elif kind == COOLDOWN and isinstance(answer.get("next_possible_at"), (int, float)):
            until = float(answer["next_possible_at"])
        else:
            until = self.clock() + self.cfg.retry_s
        self._refusal(volume, probe, message or f"growth {outcome}", until)

    def _refusal(self, volume: VolumeGrowth, probe: str, message: str, until: float) -> None:
        """Hold requests until ``until``; say it and warn the trainers once per message."""
        volume.refused_total += 1
        volume.held_until, volume.held_reason = until, message
        if message in volume.said:
            return
        volume.said.add(message)
        log.error("action=grow_refused volume=%s path=%s reason=%r",
                  volume.cfg.name, volume.cfg.path, message)  # fmt: skip
        self.trip(Trip(f"{probe}:grow", f"cannot grow {volume.cfg.path}: {message}", self.clock()))
