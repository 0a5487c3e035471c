"""The heartbeat's default probes composed from what a node is (module_utils.probe_plan and
the heartbeat_probe_plan module). Verify's verdicts on them are in
tests/unit/verify/test_verify_heartbeat.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from collection_plugins import module_utils, run_module
from nodeprep.heartbeat.config import parse
from nodeprep.lab.cloud_standin import CloudStandIn

probe_plan = module_utils("probe_plan")
ROUTES = """Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
ens3\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
ens3\t00000000\t0202000A\t0003\t0\t0\t100\t00000000\t0\t0\t0
ens9\t00000000\t0102A8C0\t0003\t0\t0\t50\t00000000\t0\t0\t0
"""


def run_plan(tmp_path: Path, **params: Any) -> dict[str, Any]:
    """The module run as Ansible runs it on a node: a process given its arguments file."""
    code, result = run_module("heartbeat_probe_plan", params, tmp_path)
    assert code == 0, result
    return result


def test_a_cloud_vm_with_a_bond_a_data_disk_and_gpus_gets_every_probe() -> None:
    node = probe_plan.Node(
        cloud="aws",
        cloud_evidence="DMI sys_vendor 'Amazon EC2'",
        metadata_url="http://169.254.169.254",
        metadata_answer="its metadata service answered at http://169.254.169.254",
        metadata_ok=True,
        nvml=True,
        bond_peer="10.0.0.2",
        gateway="10.0.0.1",
        filesystems=[
            probe_plan.Filesystem(
                "/data", "/data/.nodeprep-heartbeat", ["/data/ckpt", "/data/sets"]
            )
        ],
        nvidia=["0000:00:1e.0"],
    )
    plan = probe_plan.compose(node)
    names = [p["name"] for p in plan["probes"]]
    assert names == [
        "metadata",
        "cloud-notice",
        "bond-peer",
        "data-write",
        "data-space",
        "gpu",
        "training",
    ]
    assert plan["missing"] == []
    assert plan["unwatched"] == []
    assert plan["probes"][1] == {
        "name": "cloud-notice",
        "type": "spot_notice",
        "provider": "aws",
        "url": "http://169.254.169.254",
        "interval": 1,
        "timeout": 1,
    }
    assert (
        plan["reasons"]["data-space"] == "free space on /data, which holds /data/ckpt, /data/sets"
    )
    assert plan["reasons"]["bond-peer"] == "the bond's peer (nic_bond_probe_target)"
    parse({"probes": plan["probes"]}, check_paths=False)  # the daemon takes it as it is


def test_a_bare_node_gets_the_gateway_and_progress_and_says_what_it_left_out() -> None:
    plan = probe_plan.compose(
        probe_plan.Node(cloud_evidence="DMI sys_vendor 'QEMU'", gateway="10.0.2.2")
    )
    assert [p["name"] for p in plan["probes"]] == ["gateway", "training"]
    assert plan["missing"] == []
    assert plan["unwatched"] == [
        "cloud metadata and notices: not a cloud VM (DMI sys_vendor 'QEMU')",
        "disks: the inventory names no checkpoint or data path",
        "GPUs: no NVIDIA PCI device",
    ]


def test_a_cloud_vm_whose_metadata_is_silent_is_missing_its_notices() -> None:
    node = probe_plan.Node(
        cloud="gcp",
        cloud_evidence="DMI sys_vendor 'Google'",
        metadata_answer="http://169.254.169.254/x: timed out",
    )
    plan = probe_plan.compose(node)
    assert "metadata" not in [p["name"] for p in plan["probes"]]
    assert plan["missing"] == [
        "this is a GCP VM (DMI sys_vendor 'Google') but its metadata service did not answer: "
        "http://169.254.169.254/x: timed out; its spot and maintenance notices go unwatched"
    ]


def test_the_lowest_metric_default_route_gives_the_gateway(tmp_path: Path) -> None:
    table = tmp_path / "route"
    table.write_text(ROUTES)
    assert probe_plan.default_gateway(str(table)) == "192.168.2.1"
    table.write_text(ROUTES.splitlines()[0] + "\n")
    assert probe_plan.default_gateway(str(table)) == ""
    assert probe_plan.default_gateway(str(tmp_path / "absent")) == ""


def test_nvidia_display_and_3d_controllers_are_found(tmp_path: Path) -> None:
    for address, vendor, klass in (
        ("0000:00:1e.0", "0x10de", "0x030200"),
        ("0000:00:1f.0", "0x10de", "0x040300"),  # its audio
        ("0000:00:02.0", "0x1af4", "0x020000"),
    ):
        (tmp_path / address).mkdir()
        (tmp_path / address / "vendor").write_text(vendor + "\n")
        (tmp_path / address / "class").write_text(klass + "\n")
    assert probe_plan.nvidia_devices(str(tmp_path)) == ["0000:00:1e.0"]


def test_paths_on_one_filesystem_share_its_probes_and_missing_ones_count_for_a_parent(
    tmp_path: Path,
) -> None:
    mount = probe_plan.mount_of(str(tmp_path))
    (found,) = probe_plan.filesystems([str(tmp_path / "ckpt" / "not-yet"), str(tmp_path)])
    assert found.mount == mount
    assert found.paths == [str(tmp_path / "ckpt" / "not-yet"), str(tmp_path)]
    (root,) = probe_plan.filesystems(["/"])
    assert root.mount == "/"
    on_root = probe_plan.mount_of("/var/lib") == "/"
    assert root.probe_dir == ("/var/lib/nodeprep-heartbeat" if on_root else "/.nodeprep-heartbeat")


@pytest.mark.parametrize("provider", ["aws", "gcp", "azure"])
def test_the_module_composes_from_a_cloud_that_answers(tmp_path: Path, provider: str) -> None:
    with CloudStandIn(provider) as cloud:
        result = run_plan(tmp_path, cloud=provider, metadata_url=cloud.url, watch_paths=["/"])
    assert result["cloud"] == provider
    kinds = {p["name"]: (p["type"], p.get("provider")) for p in result["probes"]}
    assert kinds["metadata"] == ("imds", provider)
    assert kinds["cloud-notice"] == ("spot_notice", provider)
    assert "root-space" in kinds
    assert result["missing"] == []


def test_the_module_on_dmi_that_names_no_cloud_asks_no_metadata_service(
    tmp_path: Path,
) -> None:
    (tmp_path / "sys_vendor").write_text("QEMU\n")
    with CloudStandIn("aws") as cloud:
        result = run_plan(tmp_path, dmi_dir=str(tmp_path), metadata_url=cloud.url)
    assert cloud.requests == []
    assert result["cloud"] == "none"
    assert not [p for p in result["probes"] if p["type"] in ("imds", "spot_notice")]


def test_the_module_on_an_aws_vm_without_a_token_service_reports_it_missing(
    tmp_path: Path,
) -> None:
    (tmp_path / "sys_vendor").write_text("Amazon EC2\n")
    with CloudStandIn("aws", token_service=False) as cloud:
        result = run_plan(tmp_path, dmi_dir=str(tmp_path), metadata_url=cloud.url)
    assert result["cloud"] == "aws"
    (said,) = result["missing"]
    assert said.startswith("this is an AWS VM (DMI sys_vendor 'Amazon EC2', bios_version '')"), said
    assert f"PUT {cloud.url}/latest/api/token answered HTTP 404" in said


def test_a_closed_ping_group_range_leaves_the_network_out_and_says_why(tmp_path: Path) -> None:
    ranges = tmp_path / "ping_group_range"
    ranges.write_text("1\t0\n")
    closed = probe_plan.icmp_closed(998, str(ranges))
    assert closed == (
        "ICMP echo is closed to the daemon's group (gid 998) (net.ipv4.ping_group_range is "
        "'1 0'); open it with sysctl, or list a tcp probe in heartbeat_probes"
    )
    assert "closed to any group" in probe_plan.icmp_closed(None, str(ranges))
    ranges.write_text("0 2147483647\n")
    assert probe_plan.icmp_closed(998, str(ranges)) == ""
    assert probe_plan.icmp_closed(None, str(ranges)) == ""
    ranges.write_text("1000 1000\n")
    assert "gid 998" in probe_plan.icmp_closed(998, str(ranges))
    # A group not created yet may get any id: only a range open to all admits it.
    assert "closed to any group" in probe_plan.icmp_closed(None, str(ranges))
    plan = probe_plan.compose(probe_plan.Node(gateway="10.0.2.2", icmp_closed=closed))
    assert [p["name"] for p in plan["probes"]] == ["training"]
    assert f"the network: {closed}" in plan["unwatched"]


def test_gpus_without_nvml_hidden_mounts_and_name_clashes_are_said() -> None:
    disks = [
        probe_plan.Filesystem("/a-b", "/a-b/.nodeprep-heartbeat", ["/a-b/x"]),
        probe_plan.Filesystem("/a/b", "/a/b/.nodeprep-heartbeat", ["/a/b/y"]),
        probe_plan.Filesystem("/home", "/home/.nodeprep-heartbeat", ["/home/u/ckpt"]),
    ]
    plan = probe_plan.compose(probe_plan.Node(nvidia=["0000:00:1e.0"], filesystems=disks))
    names = [p["name"] for p in plan["probes"]]
    assert names == ["a-b-write", "a-b-space", "a-b--write", "a-b--space", "training"]
    assert (
        "/home, which holds /home/u/ckpt: the service's ProtectHome hides it from the daemon; "
        "keep checkpoints and data off /home and /root"
    ) in plan["unwatched"]
    assert (
        "GPUs: NVIDIA PCI device(s) 0000:00:1e.0, but heartbeat_nvml_enabled is false (a GPU "
        "probe would only skip); enable it"
    ) in plan["unwatched"]
    with_nvml = probe_plan.compose(probe_plan.Node(nvidia=["0000:00:1e.0"], nvml=True))
    assert "gpu" in [p["name"] for p in with_nvml["probes"]]


def test_a_symlinked_path_is_judged_by_the_filesystem_it_points_into(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("/proc/self")
    assert probe_plan.mount_of(str(tmp_path / "link")) == "/proc"
