"""`nodeprep build-image` refuses bad input in one sentence, exit 2, with nothing built."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeprep.cli import cli


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["build-image", *args])
    return result.exit_code, result.output


def test_help_has_examples() -> None:
    code, out = invoke("--help")
    assert code == 0
    assert "Examples:" in out
    assert "--wheelhouse" in out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--base", "docker://pytorch/pytorch:latest"], "pin the image by digest"),
        (["--wheelhouse", "/nonexistent/wheels"], "holds no .whl files"),
        # Without --fakeroot: as root on a fresh machine, its missing subordinate ids come first.
        (["--apptainer", "/nonexistent/apptainer", "--build-option", "--notest"], "does not run"),
        (["--source", "/"], "is not a nodeprep checkout"),
    ],
)
def test_bad_input_exits_2_and_builds_nothing(
    args: list[str], expected: str, tmp_path: Path
) -> None:
    output = tmp_path / "out.sif"
    code, out = invoke(*args, "--output", str(output), "--torch", "none")
    assert code == 2, out
    assert expected in out
    assert out.count("\n") == 1  # one sentence on one line
    assert list(tmp_path.iterdir()) == []


def test_output_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    code, out = invoke("--output", str(tmp_path), "--torch", "none")
    assert code == 2
    assert "is a directory" in out
