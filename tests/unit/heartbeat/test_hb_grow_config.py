"""The growth action's config: good entries load with EC2's defaults, bad ones fail with one
line naming the key and the fix, and a volume no free_space probe watches is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeprep.heartbeat import config as config_mod

VOLUME_ID = "vol-0123456789abcdef0"


def _good(tmp_path: Path) -> dict[str, Any]:
    return {
        "probes": [{"name": "data-free", "type": "free_space", "path": str(tmp_path)}],
        "grow": {
            "volumes": [
                {
                    "path": str(tmp_path),
                    "volume_id": VOLUME_ID,
                    "region": "eu-west-1",
                    "step_gb": 100,
                    "max_gb": 2000,
                }
            ]
        },
    }


def test_a_growable_volume_loads_with_ec2s_defaults(tmp_path: Path) -> None:
    grow = config_mod.parse(_good(tmp_path)).grow
    (volume,) = grow.volumes
    assert (volume.step_gb, volume.max_gb, volume.provider) == (100, 2000, "aws")
    assert (volume.when_s, volume.cooldown_hours) == (3600.0, 6.0)
    assert grow.request_dir == "/run/nodeprep/heartbeat-grow"
    assert config_mod.parse({"probes": _good(tmp_path)["probes"]}).grow.volumes == ()


def _volume(**change: Any) -> Any:
    return lambda c: c["grow"]["volumes"][0].update(change)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_volume(volume_id="vol-1"), "grow.volumes[0].volume_id: 'vol-1' is not an EBS volume id"),
        (_volume(step_gb=0), "grow.volumes[0].step_gb: must be an integer of 1 or more"),
        (_volume(max_gb=50), "grow.volumes[0].max_gb: 50 GiB is below step_gb 100"),
        (_volume(max_gb="2T"), "grow.volumes[0].max_gb: expected int"),
        (_volume(provider="azure"), "grow.volumes[0].provider: the growth action grows aws, gcp"),
        (_volume(provider="gcp"), "grow.volumes[0].volume_id: not a key of provider gcp"),
        (_volume(disk="train-data"), "grow.volumes[0].disk: not a key of provider aws"),
        (lambda c: c["grow"]["volumes"][0].update(provider="gcp", disk="Train_Data")
         or c["grow"]["volumes"][0].pop("volume_id"),
         "grow.volumes[0].disk: 'Train_Data' is not a GCE disk name"),
        (_volume(path="data"), "grow.volumes[0].path: needs an absolute directory path"),
        (_volume(device="sdb"), "grow.volumes[0].device: needs a /dev/ path"),
        (_volume(endpoint_url="ftp://x"), "grow.volumes[0].endpoint_url: needs an http://"),
        (_volume(cooldown_hours=-1), "grow.volumes[0].cooldown_hours: must be 0 or more"),
        (_volume(when_s=0), "grow.volumes[0].when_s: must be a positive number"),
        (_volume(step=5), "grow.volumes[0].step: unknown key"),
        (lambda c: c["grow"]["volumes"][0].pop("region"),
         "grow.volumes[0].region: an EBS volume needs its region"),
        (lambda c: c["grow"]["volumes"].append(
            dict(c["grow"]["volumes"][0], path=c["probes"][0]["path"] + "/sub")),
         f"grow.volumes[1].volume_id: {VOLUME_ID} is listed twice"),
        (lambda c: c["grow"].update(request_dir="/run/g", state_dir="/run/g/state"),
         "grow.state_dir: must not be inside grow.request_dir"),
        (lambda c: c["grow"].update(answer_timeout_s=600),
         "grow.answer_timeout_s: 600 s is not more than the helper may take (1320 s"),
        (lambda c: c["grow"]["volumes"].append(dict(c["grow"]["volumes"][0])),
         "grow.volumes[1].path: "),
        (lambda c: c["grow"].update(request_dir="run"), "grow.request_dir: needs an absolute"),
        (lambda c: c["grow"].update(volumes={}), "grow.volumes: expected list"),
        (lambda c: c.update(probes=[{"name": "w", "type": "writable", "path": "/"}]),
         "grow.volumes[0].path: no free_space probe watches the filesystem of"),
    ],
)  # fmt: skip
def test_bad_growth_entries_name_the_key(tmp_path: Path, mutate: Any, message: str) -> None:
    raw = _good(tmp_path)
    mutate(raw)
    with pytest.raises(config_mod.ConfigError) as caught:
        config_mod.parse(raw)
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_gcp_disk_takes_project_and_zone_from_the_metadata_server_unless_named(
    tmp_path: Path,
) -> None:
    raw = _good(tmp_path)
    raw["grow"]["volumes"][0] = {"path": str(tmp_path), "provider": "gcp", "disk": "train-data",
                                 "step_gb": 100, "max_gb": 2000}  # fmt: skip
    raw["grow"]["volumes"][0].pop("region", None)
    (volume,) = config_mod.parse(raw).grow.volumes
    assert (volume.name, volume.project, volume.zone) == ("train-data", None, None)
    assert volume.metadata_url == "http://169.254.169.254"


def test_the_controller_checks_the_document_without_the_nodes_paths(tmp_path: Path) -> None:
    raw = _good(tmp_path)
    raw["grow"]["volumes"][0]["path"] = "/not/on/this/machine"
    assert config_mod.parse(raw, check_paths=False).grow.volumes[0].path == "/not/on/this/machine"
