"""Emergency-checkpoint requests by signal: the handler only records, the loop acts.

Saving inside a signal handler could interrupt the very tensors being
saved, so SIGUSR1 (the heartbeat watchdog) and SIGTERM (preemption,
torchrun's shutdown) just note which signal came and when; the training
loop checks at each step boundary.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from types import FrameType

from nodeprep.contract import EMERGENCY_SIGNAL


@dataclass(frozen=True)
class EmergencyRequest:
    signal_name: str
    signal_time: float

    @property
    def should_exit(self) -> bool:
        """SIGTERM means the process is going away; SIGUSR1 means save and carry on."""
        return self.signal_name == "SIGTERM"


class EmergencyFlag:
    """Installs the handlers and holds the first request not yet acted on."""

    def __init__(self) -> None:
        self._request: EmergencyRequest | None = None

    def install(self) -> None:
        for signum in (EMERGENCY_SIGNAL, signal.SIGTERM):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # A SIGTERM arriving after a SIGUSR1 must still make the loop exit.
        name = signal.Signals(signum).name
        if self._request is None or name == "SIGTERM":
            self._request = EmergencyRequest(name, time.time())

    def take(self) -> EmergencyRequest | None:
        """The pending request, clearing it."""
        request, self._request = self._request, None
        return request

    def peek(self) -> EmergencyRequest | None:
        return self._request
