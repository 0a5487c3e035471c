"""Role variables of a wrong type or value are refused on the controller: one sentence naming
the variable, where it was set and the spec that describes it, exit 2, nothing run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodeprep import paths, rolevars, runner
from nodeprep.cli import cli


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("command", "extra", "said"),
    [
        ("provision", "nic_bond_mode=active-bakup",
         "-e: nic_bond_mode = 'active-bakup' is not valid for role nic_bond (value of "
         "nic_bond_mode must be one of: balance-rr, active-backup"),
        ("provision", "nic_bond_miimon=ten", "unable to convert to int"),
        ("provision", "nic_bond_arp_validate=sometimes",
         "nic_bond_arp_validate = 'sometimes' is not valid for role nic_bond"),
        ("provision", '{"volume_grow_volumes": [{"device": "/dev/vdb", "sizegb": 3}]}',
         "unsupported key volume_grow_volumes.sizegb"),
        ("provision", "tmux_install_method=pkg", "tmux_install_method must be one of: auto"),
        ("verify", "smoke_steps=many", "for role smoke"),
        ("verify", '{"node_checks_checkpoint_dirs": {"a": 1}}', "for role node_checks"),
        # Inside the heartbeat's lists: the daemon's own parser judges them.
        ("provision", '{"heartbeat_probes": [{"name": "net", "type": "ping"}]}',
         "(probes[0].type: unknown probe type 'ping'; use one of http"),
        ("provision", '{"heartbeat_probes": [{"name": "p", "type": "progress", "floor_s": 90, '
         '"ceiling_s": 60}]}', "for role heartbeat (probes[0].floor_s: 90 s exceeds ceiling_s"),
        ("provision", '{"heartbeat_probes": [{"name": "d", "type": "free_space", '
         '"path": "/data", "critical_percent": 50}]}', "critical_percent: 50 is above warn_"),
        ("provision", '{"heartbeat_probes": [{"name": "m", "type": "imds", "provider": "oci"}]}',
         "(probes[0].provider: unknown provider 'oci'; use one of aws, gcp, azure)"),
        ("provision", '{"heartbeat_grow_volumes": [{"path": "/data", "volume_id": "vol-1", '
         '"step_gb": 1, "max_gb": 2}]}',
         "(grow.volumes[0].volume_id: 'vol-1' is not an EBS volume id; ids look like vol-"),
        ("provision", '{"heartbeat_grow_volumes": [{"path": "/data", "volume_id": '
         '"vol-0123456789abcdef0", "region": "eu-west-1", "step_gb": 100, "max_gb": 50}]}',
         "(grow.volumes[0].max_gb: 50 GiB is below step_gb 100"),
        ("provision", "heartbeat_cloud=oracle",
         "heartbeat_cloud must be one of: auto, aws, gcp, azure, none"),
        ("provision", "heartbeat_metadata_url=https://169.254.169.254",
         "(the metadata service answers plain http://, as http://IP)"),
        ("verify", "smoke_workers=two", "for role smoke"),
        ("verify", "smoke_data=datasets/sample",
         "(smoke_data holds 'datasets/sample'; give absolute paths)"),
        ("provision", '{"heartbeat_watch_paths": ["/data", "ckpt"]}',
         "(heartbeat_watch_paths holds 'ckpt'; give absolute paths)"),
        ("provision", '{"heartbeat_actions": {"hang": {"signals": ["SIGHUP"]}}}',
         "(actions.hang.signals: must list signals among SIGINT"),
        # Inside the data sets: the node's own staging rules, before any node is reached.
        ("provision", '{"datasets": [{"name": "c", "dest": "data/c", "files": [{"url": '
         '"https://d.example/a.bin", "sha256": "' + "a" * 64 + '"}]}]}',
         "for role dataset (data set 'c': dest must be an absolute, normalised directory"),
        ("provision", '{"datasets": [{"name": "c", "dest": "/data/c", "files": [{"url": '
         '"ftp://d.example/a.bin", "sha256": "' + "a" * 64 + '"}]}]}',
         "files[0]: 'ftp://d.example/a.bin' is not an http:// or https:// URL"),
        ("provision", '{"datasets": [{"name": "c", "dest": "/data/c", "files": [{"src": '
         '"/srv/a.bin", "sha256": "abc"}]}]}', "files[0]: sha256 must be 64 hexadecimal digits"),
        ("provision", '{"datasets": [{"name": "c", "dest": "/data/c", "files": [{"src": '
         '"/srv/a.bin", "url": "https://d.example/a.bin", "sha256": "' + "a" * 64 + '"}]}]}',
         "needs exactly one of url (to download) or src (to copy)"),
        ("provision", '{"datasets": [{"name": "c", "dest": "/data/c", "files": [{"src": '
         '"/srv/a.bin", "path": "../a.bin", "sha256": "' + "a" * 64 + '"}]}]}',
         "path must be a plain relative path inside dest"),
        ("provision", '{"dataset_allowed_roots": ["data"]}',
         "dataset_allowed_roots holds 'data'; each must be an absolute, normalised path"),
        ("provision", "dataset_retry_max_attempts=many", "for role dataset"),
        # The interconnect check's limits and sizes (role interconnect, entry point verify).
        ("verify", "interconnect_min_busbw_gbps=-1",
         "interconnect_min_busbw_gbps = '-1' is not valid for role interconnect (give a "
         "number of at least 0)"),
        ("verify", "interconnect_iters=0", "(give a number of at least 1)"),
        ("verify", "interconnect_rdzv_port=70000", "at least 1 and at most 65535"),
        ("verify", "interconnect_max_latency_ms=fast", "for role interconnect"),
        ("verify", '{"interconnect_sizes": [4096, 2]}',
         "(give one or more message sizes in bytes, each at least 4)"),
        ("verify", '{"interconnect_sizes": []}', "each at least 4"),
        ("verify", "interconnect_sizes=4096,2", "(give one or more message sizes in bytes"),
    ],
)  # fmt: skip
def test_a_wrong_value_given_with_e_is_refused(
    runs: list[runner.RunRequest], local_inventory: Path, command: str, extra: str, said: str
) -> None:
    code, out = invoke(command, str(local_inventory), "-e", extra)
    assert code == 2, out
    assert said in out, out
    assert "meta/argument_specs.yml describes" in out
    assert "Traceback" not in out
    assert runs == []


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # A host line's value.
        ("[gpu]\nnode1 ansible_host=127.0.0.1\nnode2 ansible_host=127.0.0.1 "
         "heartbeat_watchdog_sec=soon\n", "host node2: heartbeat_watchdog_sec = 'soon'"),
        # A group's value, next to a template that is left to the role.
        ("[gpu]\nnode1 ansible_host=127.0.0.1\n[gpu:vars]\n"
         'tmux_history_limit="{{ 10 * 1000 }}"\nheartbeat_watchdog_sec=perhaps\n',
         "host node1: heartbeat_watchdog_sec = 'perhaps'"),
    ],
)  # fmt: skip
def test_a_wrong_value_in_the_inventory_names_the_host_and_e_overrides_it(
    runs: list[runner.RunRequest], tmp_path: Path, text: str, said: str
) -> None:
    inventory = tmp_path / "fleet.ini"
    inventory.write_text(text)
    code, out = invoke("provision", str(inventory))
    assert code == 2, out
    assert f"inventory {inventory}, {said}" in out, out
    assert "tmux_history_limit" not in out
    assert runs == []
    # -e wins over the inventory, so a good -e value makes the run go ahead.
    code, out = invoke("provision", str(inventory), "-e", "heartbeat_watchdog_sec=20")
    assert code == 0, out
    assert len(runs) == 1


def test_good_values_and_names_no_role_declares_pass() -> None:
    good = {"nic_bond_members": ["ens4", "ens5"], "nic_bond_miimon": "100",
            "volume_grow_volumes": [{"device": "/dev/vdb"}], "preflight_min_free_gb": 10,
            "heartbeat_probes": [{"name": "gpu", "type": "gpu"}], "my_var": object(),
            "interconnect_sizes": "4096", "interconnect_rdzv_port": "29410",
            "interconnect_min_busbw_gbps": 0}  # fmt: skip
    rolevars.check(good, "-e")
    with pytest.raises(rolevars.RoleVarError) as caught:
        rolevars.check({**good, "tmux_users": {"a": 1}}, "-e")
    assert str(caught.value).startswith("-e: tmux_users = {'a': 1} is not valid for role tmux")
    assert "\n" not in str(caught.value)


def test_every_role_variable_is_declared_once_or_alike() -> None:
    """A variable two entry points declare must mean the same there (type and elements)."""
    seen: dict[str, tuple[object, object]] = {}
    for spec_file in paths.roles_dir().glob("*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(spec_file.read_text())["argument_specs"].values():
            for name, spec in entry.get("options", {}).items():
                shape = (spec.get("type", "str"), spec.get("elements"))
                assert seen.setdefault(name, shape) == shape, (spec_file, name)
    assert set(seen) == set(rolevars.declared())
