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
from typing import Any

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
    """Installs the handlers and holds the first request not yet acted on.

    Handlers already installed for those signals (a framework's, a launcher's) are kept:
    after recording the request, the flag calls the previous Python handler with the same
    arguments, unless ``chain=False``. ``SIG_DFL`` and ``SIG_IGN`` are not called (the
    default action of SIGTERM would end the process before the loop can save).
    ``uninstall()`` puts the previous handlers back. A chained handler that raises or exits
    (some frameworks' SIGTERM handlers do) ends the loop before the emergency save: use
    ``chain=False`` there and call the framework's own shutdown after the save.
    """

    def __init__(self, chain: bool = True) -> None:
        self._request: EmergencyRequest | None = None
        self.chain = chain
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in (EMERGENCY_SIGNAL, signal.SIGTERM):
            previous = signal.signal(signum, self._handle)
            if signum not in self._previous:  # installing twice must not chain to itself
                self._previous[signum] = previous

    def uninstall(self) -> None:
        """Restore the handlers that were there before ``install``."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # A SIGTERM arriving after a SIGUSR1 must still make the loop exit.
        name = signal.Signals(signum).name
        if self._request is None or name == "SIGTERM":
            self._request = EmergencyRequest(name, time.time())
        previous = self._previous.get(signum)
        if self.chain and callable(previous):
            previous(signum, frame)

    def take(self) -> EmergencyRequest | None:
        """The pending request, clearing it."""
        request, self._request = self._request, None
        return request

    def peek(self) -> EmergencyRequest | None:
        return self._request
