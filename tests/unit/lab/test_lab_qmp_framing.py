"""QMP framing: whole JSON lines become messages, a partial line waits for more bytes."""

from __future__ import annotations

import json

import pytest

from nodeprep.lab.errors import LabError
from nodeprep.lab.qmp import encode_command, split_messages


def test_split_keeps_partial_line_for_next_read() -> None:
    messages, rest = split_messages(b'{"return": {}}\n{"event": "STOP"}\n{"retu')
    assert messages == [{"return": {}}, {"event": "STOP"}]
    assert rest == b'{"retu'
    messages, rest = split_messages(rest + b'rn": 1}\n')
    assert messages == [{"return": 1}]
    assert rest == b""


def test_split_skips_blank_lines() -> None:
    assert split_messages(b"\r\n\n") == ([], b"")


@pytest.mark.parametrize("line", [b"not json\n", b"[1, 2]\n"])
def test_split_rejects_non_objects(line: bytes) -> None:
    with pytest.raises(LabError, match="QMP sent"):
        split_messages(line)


def test_encode_command_with_and_without_arguments() -> None:
    assert json.loads(encode_command("stop")) == {"execute": "stop"}
    encoded = encode_command("set_link", {"name": "b0", "up": False})
    assert encoded.endswith(b"\n")
    assert json.loads(encoded) == {"execute": "set_link", "arguments": {"name": "b0", "up": False}}
