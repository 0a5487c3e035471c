"""Running external tools with their output sent to the log, so long steps show progress."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Sequence

from nodeprep.lab.errors import LabError

log = logging.getLogger(__name__)


def run_logged(argv: Sequence[str], step: str, tail_lines: int = 20) -> None:
    """Run argv, log each output line as it comes, raise LabError with the tail on failure."""
    log.debug("running %s", " ".join(argv))
    tail: list[str] = []
    with subprocess.Popen(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            tail = [*tail[-(tail_lines - 1) :], line]
            log.info("%s: %s", step, line)
        rc = proc.wait()
    if rc != 0:
        detail = "\n".join(tail)
        raise LabError(f"{step} failed (exit {rc}); last output:\n{detail}")


def run_quiet(argv: Sequence[str], step: str) -> str:
    """Run a short tool, return its stdout, raise LabError with its stderr on failure."""
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LabError(f"{step} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout
