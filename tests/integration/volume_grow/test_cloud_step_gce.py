"""The cloud step of roles/volume_grow for GCP persistent disks, against a stand-in of the
Compute Engine API on 127.0.0.1 (tests/gce_standin.py; no GCP emulator exists)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gce_standin import PROJECT, GceStandIn
from nodeprep import runner

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
TOKEN = "ya29.test-token"
ZONE = "europe-west4-a"


@pytest.fixture
def gce(monkeypatch: pytest.MonkeyPatch) -> Iterator[GceStandIn]:
    monkeypatch.setenv("GCP_ACCESS_TOKEN", TOKEN)
    monkeypatch.delenv("GCP_PROJECT", raising=False)
    with GceStandIn(TOKEN) as standin:
        standin.add_disk(ZONE, "train-data", 10)
        standin.add_disk("europe-west4-b", "elsewhere", 10)
        yield standin


def grow(
    tmp_path: Path, inventory: Path, gce: GceStandIn, volumes: list[dict[str, Any]], **extra: Any
) -> runner.RunResult:
    play = tmp_path / "play.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  roles: [volume_grow]\n")
    variables = {
        "volume_grow_volumes": volumes,
        "volume_grow_guest_enabled": False,
        "volume_grow_gcp_project": PROJECT,
        "volume_grow_gcp_zone": ZONE,
        "volume_grow_gcp_endpoint_url": gce.url,
        **extra,
    }
    return runner.run(runner.RunRequest(playbook=play, inventory=inventory, extra_vars=variables))


def messages(result: runner.RunResult) -> str:
    return " ".join(f.message for f in result.failures)


def test_a_disk_is_resized_and_a_second_run_changes_nothing(
    gce: GceStandIn, local_inventory: Path, tmp_path: Path
) -> None:
    first = grow(tmp_path, local_inventory, gce, [{"gce_disk": "train-data", "size_gb": 20}])
    assert first.exit_code == 0, first.failures
    assert first.recap["localhost"].changed == 1
    assert gce.size(ZONE, "train-data") == 20
    assert gce.resizes == [("train-data", 20)]
    second = grow(tmp_path, local_inventory, gce, [{"gce_disk": "train-data", "size_gb": 20}])
    assert second.exit_code == 0, second.failures
    assert second.recap["localhost"].changed == 0
    assert gce.resizes == [("train-data", 20)]


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ({"gce_disk": "train-data", "size_gb": 5},
         "Refusing to shrink GCP disk train-data from 10 GiB to 5 GiB: persistent disks can only "
         "grow; set size_gb to 10 or more."),
        ({"gce_disk": "nothere", "size_gb": 20},
         f"GCP disk nothere does not exist in project {PROJECT}; check gce_disk"),
        ({"gce_disk": "elsewhere", "size_gb": 20},
         f"GCP disk elsewhere is in zone europe-west4-b, not {ZONE}; set the volume's zone"),
        ({"gce_disk": "Bad_Name", "size_gb": 20}, "'Bad_Name' is not a GCE disk name"),
        ({"gce_disk": "train-data", "id": "vol-0123456789abcdef0", "size_gb": 20},
         "not both an id and a gce_disk"),
    ],
)  # fmt: skip
def test_one_bad_entry_resizes_nothing(
    gce: GceStandIn, local_inventory: Path, tmp_path: Path, bad: dict[str, Any], said: str
) -> None:
    gce.add_disk(ZONE, "scratch", 10)
    volumes = [{"gce_disk": "scratch", "size_gb": 15}, bad]
    result = grow(tmp_path, local_inventory, gce, volumes)
    assert result.exit_code != 0
    assert said in messages(result), messages(result)
    assert gce.resizes == []
    assert gce.size(ZONE, "scratch") == 10


def test_without_a_token_or_a_zone_nothing_is_called(
    gce: GceStandIn, local_inventory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_zone = grow(tmp_path, local_inventory, gce, [{"gce_disk": "train-data", "size_gb": 20}],
                   volume_grow_gcp_zone="")  # fmt: skip
    assert no_zone.exit_code != 0
    assert "a zone (or volume_grow_gcp_zone)" in messages(no_zone)
    monkeypatch.delenv("GCP_ACCESS_TOKEN")
    no_token = grow(tmp_path, local_inventory, gce, [{"gce_disk": "train-data", "size_gb": 20}])
    assert no_token.exit_code != 0
    assert "No GCP access token on the controller: export GCP_ACCESS_TOKEN" in messages(no_token)
    assert gce.requests == []
