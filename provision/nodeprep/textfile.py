"""Reading a user-named text file without hanging, exhausting memory or a traceback.

An inventory or an ``-e @FILE`` may name a FIFO (a read blocks for ever), a device (a
read never ends), a directory or a binary file. Each is refused with one sentence that
names the file, in the caller's words, and the fix.
"""

from __future__ import annotations

import stat
from pathlib import Path


class TextFileError(ValueError):
    """The file cannot be read as the text the caller needs; the message says why and what to do."""


def read_text(path: Path, label: str, fix: str, max_bytes: int) -> str:
    """The UTF-8 text of the regular file ``path``; ``label`` names it in every refusal."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise TextFileError(f"{label} does not exist; {fix}.") from None
    except OSError as exc:
        raise TextFileError(f"{label} cannot be read ({exc.strerror}); {fix}.") from None
    if stat.S_ISDIR(mode):
        raise TextFileError(f"{label} is a directory; {fix}.")
    if not stat.S_ISREG(mode):
        raise TextFileError(f"{label} is not a regular file (a pipe, socket or device); {fix}.")
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise TextFileError(f"{label} cannot be read ({exc.strerror}); {fix}.") from None
    if len(data) > max_bytes:
        raise TextFileError(f"{label} is larger than {max_bytes >> 20} MiB; {fix}.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TextFileError(
            f"{label}:{line} is not UTF-8 text (byte {data[exc.start]:#04x}); {fix}."
        ) from None
