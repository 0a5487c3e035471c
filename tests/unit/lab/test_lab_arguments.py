"""Bad input to the lab CLI: one clear sentence, exit code 2, nothing started or removed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nodeprep.cli.lab import lab
from nodeprep.lab import metadata
from nodeprep.lab.errors import LabInputError
from nodeprep.lab.faults import parse_size
from nodeprep.lab.lifecycle import UpRequest
from nodeprep.lab.state import LabState, NodeRecord, save_state


@pytest.mark.parametrize(
    ("text", "size"), [("2G", 2 * 1024**3), ("1536M", 1536 * 1024**2), ("2GiB", 2 * 1024**3),
                       ("4096", 4096), ("3t", 3 * 1024**4)],
)  # fmt: skip
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "2X", "-1G", "1.5G", "0", "1000"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(LabInputError, match="Disk size"):
        parse_size(text)


@pytest.mark.parametrize(
    ("request_", "message"),
    [(UpRequest(nodes=0), "--nodes 0"), (UpRequest(memory_mb=64), "--memory 64"),
     (UpRequest(cpus=99), "--cpus 99"), (UpRequest(distro="sid"), "Unknown distro")],
)  # fmt: skip
def test_up_request_validation(request_: UpRequest, message: str) -> None:
    with pytest.raises(LabInputError, match=message):
        request_.validate()


@pytest.fixture
def lab_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NODEPREP_LAB_DIR", str(tmp_path / "lab"))
    monkeypatch.setenv("NODEPREP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "lab"


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["up", "--nodes", "0"], "0 is not in the range"),
     (["up", "--distro", "sid"], "'sid' is not one of"),
     (["status"], "No lab is running"), (["inventory"], "No lab is running"),
     (["fault", "node1", "link-down", "b0"], "No lab is running"),
     (["fault", "node1", "explode", "b0"], "'explode' is not one of"),
     (["apptainer-vars", "t.sif", "--output", "v.json"], "No lab is running"),
     (["apptainer-vars", "t.sif"], "Missing option '--output'"),
     (["metadata", "node1", "up"], "No lab is running"),
     (["metadata", "node1", "sideways"], "'sideways' is not one of"),
     (["metadata", "node1", "up", "--provider", "ibm"], "'ibm' is not one of")],
)  # fmt: skip
def test_cli_bad_input_exits_2(lab_dir: Path, argv: list[str], message: str) -> None:
    result = CliRunner().invoke(lab, argv)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not lab_dir.exists()


def test_fault_names_unknown_node_and_nic(lab_dir: Path) -> None:
    save_state(lab_dir, LabState("trixie", "x", "tcg", "k", [NodeRecord("node1", 1, "/nx", 0)]))
    result = CliRunner().invoke(lab, ["fault", "node9", "link-down", "b0"])
    assert result.exit_code == 2
    assert "No lab node named 'node9'; running nodes: node1." in result.output
    result = CliRunner().invoke(lab, ["fault", "node1", "link-down", "eth7"])
    assert result.exit_code == 2
    assert "NIC 'eth7' is not a lab NIC; choose one of: b0, b1, mgmt." in result.output
    result = CliRunner().invoke(lab, ["metadata", "node9", "up"])
    assert result.exit_code == 2
    assert "No lab node named 'node9'; running nodes: node1." in result.output
    result = CliRunner().invoke(lab, ["up"])
    assert result.exit_code == 2
    assert "already running" in result.output
    assert (lab_dir / "lab.json").is_file()


def test_inventory_output_to_missing_directory(lab_dir: Path, tmp_path: Path) -> None:
    save_state(lab_dir, LabState("trixie", "x", "tcg", "k", [NodeRecord("node1", 1, "/nx", 0)]))
    target = tmp_path / "missing" / "lab.ini"
    result = CliRunner().invoke(lab, ["inventory", "--output", str(target)])
    assert result.exit_code == 2
    assert f"Cannot write the inventory to {target}" in result.output
    written = CliRunner().invoke(lab, ["inventory", "--output", str(tmp_path / "lab.ini")])
    assert written.exit_code == 0
    assert written.output.strip() == str(tmp_path / "lab.ini")
    assert "node1 ansible_host=127.0.0.1 ansible_port=1 " in (tmp_path / "lab.ini").read_text()


def test_apptainer_vars_names_a_missing_image_and_writes_nothing(
    lab_dir: Path, tmp_path: Path
) -> None:
    save_state(lab_dir, LabState("trixie", "x", "tcg", "k", [NodeRecord("node1", 1, "/nx", 0)]))
    image, output = tmp_path / "missing.sif", tmp_path / "vars.json"
    result = CliRunner().invoke(lab, ["apptainer-vars", str(image), "--output", str(output)])
    assert result.exit_code == 2
    assert f"Image {image} does not exist; build it first with `nodeprep build-image" in (
        result.output
    )
    assert not output.exists()


def test_the_metadata_stand_in_is_a_unit_that_comes_back_with_the_boot() -> None:
    """Enabled, before the heartbeat (whose notice probe must find it from the first), its
    address on the dummy interface first, its record removed when it stops."""
    text = metadata.unit_text("gcp")
    lines = text.splitlines()
    assert "Before=nodeprep-heartbeat.service" in lines
    assert "WantedBy=multi-user.target" in lines
    (pre,) = [line for line in lines if line.startswith("ExecStartPre=")]
    assert "ip link add npmeta0 type dummy" in pre
    assert "ip addr replace 169.254.169.254/32 dev npmeta0" in pre
    assert f"ExecStart=/usr/bin/python3 {metadata.DEST} gcp 169.254.169.254 80 " in text
    assert metadata.DEST.startswith("/var/lib/")  # kept across the boot, unlike /run
    assert "ExecStopPost=/bin/rm -f /run/nodeprep/metadata-standin.json" in lines
