"""`nodeprep build-image` refuses bad input in one sentence, exit 2, with nothing built."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeprep.cli import cli
from nodeprep.image.request import subid_problem


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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "needs a root entry in"),
        ("alice:100000:65536\n", "needs a root entry in"),
        ("root:100000:1000\n", "its root entries (root:100000:1000) hold fewer"),
        ("root:100000:lots\n", "hold fewer"),
        ("root:1:10\nroot:200000:65536\n", None),
    ],
)
def test_fakeroot_needs_a_full_range_of_subordinate_ids(
    text: str, expected: str | None, tmp_path: Path
) -> None:
    problem = subid_problem(text, tmp_path / "subuid")
    if expected is None:
        assert problem is None
    else:
        assert problem is not None
        assert expected in problem
        assert f"add `root:100000:65536` to {tmp_path / 'subuid'}" in problem
