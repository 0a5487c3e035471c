"""Each lab progress line is printed once, in the lab's own format."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import logging
import importlib
lab = importlib.import_module("nodeprep.cli.lab")
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
lab._progress_logging()
logging.getLogger("nodeprep.lab.image").info("building the lab image")
"""


def test_a_progress_line_is_printed_once() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stderr.splitlines() == ["lab: building the lab image"]
