"""`nodeprep drill`: bad input is one sentence, exit 2, no playbook, no ssh; a node's
refusal is exit 2; the report's exit code follows the drills; and the node-side pieces that
need no node (fault names, the log timeline, the bond reader, the before/after compare)."""

from __future__ import annotations

import json
import os
import re
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodeprep import drill, job, runner
from nodeprep.cli import cli

LAB = "[lab]\nnode1 ansible_host=127.0.0.1 ansible_port=2222 nodeprep_lab_bond_nics=ens4,ens5\n"


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--faults", ""], "--faults '' names no fault"),
        (["--faults", "kill,,netem"], "names no fault (or has an empty item)"),
        (["--faults", "explode"], "unknown fault 'explode'"),
        (["--faults", "blackhole"], "--faults blackhole can cut gpu01 off its network; add --yes"),
        (["--faults", "reboot"], "--faults reboot can cut gpu01 off its network; add --yes"),
        (["--faults", "kill", "--name", "a b"], "--name 'a b' is not a job name"),
        (["--faults", "kill", "-l", "nosuch"], "nosuch"),
        (["--faults", "kill", "--duration", "0"], "--duration"),
        (["--faults", "link"], "can cut gpu01 off its network; add --yes"),
        (["--faults", "kill,netem", "-l", "gpu02"], "--faults netem can cut gpu02 off"),
        (["--faults", "kill", "-e", "job_drill_duration_s=long"], "job_drill_duration_s"),
        (
            ["--faults", "preempt", "-e", '{"job_heartbeat_config": ["/a", "/b"]}'],
            "job_heartbeat_config",
        ),
        (
            ["--faults", "disk-full", "-e", '{"job_heartbeat_metrics_path": {"p": 1}}'],
            "job_heartbeat_metrics_path",
        ),
        (
            ["--faults", "disk-full", "-e", "job_heartbeat_metrics_path=hb.prom"],
            "job_heartbeat_metrics_path = 'hb.prom' is not valid for role job (give one absolute",
        ),
        ([], "--faults"),
    ],
)
def test_bad_input_is_refused_before_any_node(
    runs: list[runner.RunRequest], ssh_calls: Path, fleet: Path, args: list[str], expected: str
) -> None:
    code, out = invoke("drill", str(fleet), *args)
    assert code == 2, out
    assert expected in out, out
    assert "Traceback" not in out
    assert len(out.strip().splitlines()) <= 3, out
    assert runs == []
    assert not ssh_calls.exists()


def _result(jobs: list[dict[str, Any]], failures: list[runner.TaskFailure]) -> runner.RunResult:
    return runner.RunResult(
        status="failed" if failures else "successful", rc=2 if failures else 0,
        recap={}, failures=failures, jobs=jobs,
    )  # fmt: skip


def _found(fault: str, passed: bool, **more: Any) -> dict[str, Any]:
    return {
        "fault": fault, "passed": passed, "detected_by": "torchrun", "detect_s": 1.2,
        "steps_lost": 3, "steps_lost_limit": 10, "next_step_s": 9.5, "restored": True,
        "problems": [] if passed else ["4 step(s) lost, more than the limit 0"],
        "detail": f"{fault} detail", **more,
    }  # fmt: skip


def test_named_job_drills_on_the_chosen_node_and_reports(
    monkeypatch: pytest.MonkeyPatch, fleet: Path, tmp_path: Path
) -> None:
    seen: list[runner.RunRequest] = []
    answers = [_found("kill", True), _found("netem", False)]

    def fake(request: runner.RunRequest, on_progress: object = None) -> runner.RunResult:
        seen.append(request)
        return _result([{"host": "gpu02", "drill": answers[len(seen) - 1]}], [])

    monkeypatch.setattr(runner, "run", fake)
    out_json, out_xml = tmp_path / "d.json", tmp_path / "d.xml"
    code, out = invoke("drill", str(fleet), "--name", "pretrain", "--faults", "kill,netem",
                       "-l", "gpu02", "--yes", "--json", str(out_json), "--junit", str(out_xml),
                       "--duration", "7")  # fmt: skip
    assert code == 1, out
    assert [r.limit for r in seen] == ["gpu02", "gpu02"]  # the named job: no start, no stop
    given = seen[1].extra_vars
    assert given["nodeprep_job_action"] == "drill"
    assert given["job_drill_fault"] == "netem"
    assert given["job_drill_duration_s"] == 7
    assert re.fullmatch(r"pretrain-\d{8}-\d{6}-2-netem", given["job_drill_id"]), given
    assert "FAILED (netem): 2 of 2 drill(s) ran" in out, out
    assert "4 step(s) lost, more than the limit 0" in out
    report = json.loads(out_json.read_text())
    assert [d["fault"] for d in report["drills"]] == ["kill", "netem"]
    assert report["exit_code"] == 1
    cases = ET.parse(out_xml).getroot().findall(".//testcase")
    assert [c.get("name") for c in cases] == ["drill.kill", "drill.netem"]
    assert cases[1].find("failure") is not None


def test_own_job_is_started_then_stopped_and_a_refusal_is_exit_2(
    monkeypatch: pytest.MonkeyPatch, fleet: Path
) -> None:
    seen: list[runner.RunRequest] = []
    said = "gpu01: the node has no bond with two members up; the link drill would cut it off."
    refused = runner.TaskFailure("gpu01", "Drill", "job", said, refused=True)

    def fake(request: runner.RunRequest, on_progress: object = None) -> runner.RunResult:
        seen.append(request)
        if request.extra_vars["nodeprep_job_action"] == "drill":
            return _result([], [refused])
        return _result([], [])

    monkeypatch.setattr(runner, "run", fake)
    code, out = invoke("drill", str(fleet), "--faults", "link,kill", "--yes")
    assert code == 2, out
    actions = [r.extra_vars["nodeprep_job_action"] for r in seen]
    assert actions == ["run", "drill", "stop"]  # the second fault never ran
    assert [r.limit for r in seen] == ["gpu01", "gpu01", "gpu01"]  # the own job: that node only
    assert seen[0].extra_vars["job_trainer_extra_args"] == ["--min-step-s", "0.5"]
    assert seen[0].extra_vars["job_name"] == seen[2].extra_vars["job_name"]
    assert "no bond with two members up" in out


@pytest.mark.parametrize("same", [True, False])
def test_own_job_is_replayed_after_its_stop_and_a_differing_state_fails(
    monkeypatch: pytest.MonkeyPatch, fleet: Path, tmp_path: Path, same: bool
) -> None:
    """The drill's own job, stopped, is replayed on its node: the verdict (bit-exact with an
    uninterrupted run, or not) goes to the output, the JSON and the JUnit, and a differing
    state is exit 1 although every drill passed."""
    seen: list[str] = []
    replayed = {
        "bit_exact": same,
        "step": 60,
        "job_sha256": "a" * 64,
        "uninterrupted_sha256": ("a" if same else "b") * 64,
        "seconds": 4.0,
        "detail": "the job's state at step 60 equals an uninterrupted run's"
        if same
        else "the job's state at step 60 DIFFERS FROM an uninterrupted run's",
    }

    def fake(request: runner.RunRequest, on_progress: object = None) -> runner.RunResult:
        action = request.extra_vars["nodeprep_job_action"]
        seen.append(action)
        if action == "drill":
            return _result([{"host": "gpu01", "drill": _found("kill", True)}], [])
        if action == "replay":
            return _result([{"host": "gpu01", "replay": replayed}], [])
        return _result([], [])

    monkeypatch.setattr(runner, "run", fake)
    out_json, out_xml = tmp_path / "d.json", tmp_path / "d.xml"
    code, out = invoke("drill", str(fleet), "--faults", "kill", "--json", str(out_json),
                       "--junit", str(out_xml))  # fmt: skip
    assert seen == ["run", "drill", "stop", "replay"]
    assert code == (0 if same else 1), out
    assert f"final state: {replayed['detail']}" in out
    assert ("PASSED: 1 of 1" if same else "FAILED (final state): 1 of 1") in out, out
    report = json.loads(out_json.read_text())
    assert report["final_state"] == replayed
    cases = {c.get("name"): c for c in ET.parse(out_xml).getroot().findall(".//testcase")}
    assert sorted(cases) == ["drill.final_state", "drill.kill"]
    assert (cases["drill.final_state"].find("failure") is None) == same


def test_the_lab_needs_no_yes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    lab = tmp_path / "lab.ini"
    lab.write_text(LAB)
    calls: list[str] = []

    def fake(request: runner.RunRequest, on_progress: object = None) -> runner.RunResult:
        calls.append(request.extra_vars["nodeprep_job_action"])
        return _result([{"host": "node1", "drill": _found("link", True)}], [])

    monkeypatch.setattr(runner, "run", fake)
    code, out = invoke("drill", str(lab), "--name", "j", "--faults", "link")
    assert code == 0, out
    assert calls == ["drill"]
    assert "PASSED: 1 of 1 drill(s)" in out


def test_fault_names() -> None:
    assert drill.parse_faults(" kill , netem,kill") == ["kill", "netem", "kill"]
    assert set(drill.STEPS_LOST_LIMIT) == set(drill.FAULTS)
    assert drill.checkpoint_every(["-m", "x", "--checkpoint-every", "20"]) == 20
    assert drill.checkpoint_every(["--checkpoint-every=7"]) == 7
    assert drill.checkpoint_every(["train.py"]) == 50


def test_the_timeline_reads_torchrun_the_resume_and_the_next_step(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("step 40 loss=0.1 t=100.0\n")
    watch = drill.LogWatch(str(log))
    with open(log, "a") as handle:
        handle.write("step 41 loss=0.1 t=101.0\n")
        handle.write("[W] worker 1 failed (exitcode: -9) local_rank: 0\n")
        handle.write("start step=30 resumed=True\nstep 31 loss=0.1 t=109.5\nstep 3")
    timeline = drill.Timeline(fault_time=101.5)
    timeline.feed(watch.poll())
    assert timeline.torchrun_saw is not None
    assert (timeline.resumed_from, timeline.restarts) == (30, 1)
    assert timeline.steps == [(31, 109.5)]  # step 41 came before the fault
    assert watch.partial == "step 3"  # a line still being written waits for its end
    assert drill.last_step(str(log)) == (31, 109.5)


def test_before_and_after(tmp_path: Path) -> None:
    before = {"qdisc": ["fq_codel", "0:"], "members_up": {"bond0": ["ens4", "ens5"]}}
    assert drill.differences(before, before) == []
    after = {"qdisc": ["netem", "8001:"], "members_up": {"bond0": ["ens5"]}}
    left = drill.differences(before, after)
    assert len(left) == 2
    assert "root qdisc ['netem', '8001:']" in left[0]
    assert "bond bond0 members up ['ens5']" in left[1]
    # A blackhole's filters left on a member (a record from before tc_hooks has none).
    hooked = drill.differences({**before, "tc_hooks": []}, {**before, "tc_hooks": ["ens4"]})
    assert hooked == ["tc filter hooks on ['ens4'] where they were on []"]
    assert drill.differences(before, {**before, "tc_hooks": []}) == []


BOND = """Ethernet Channel Bonding Driver: v6.1.0

Bonding Mode: fault-tolerance (active-backup)
Primary Slave: None
Currently Active Slave: ens4
MII Status: up
MII Polling Interval (ms): 100

Slave Interface: ens4
MII Status: up
Speed: Unknown

Slave Interface: ens5
MII Status: down
Speed: Unknown
"""


def test_bonds_are_read_from_proc(tmp_path: Path) -> None:
    (tmp_path / "bond0").write_text(BOND)
    (found,) = drill.bonds(str(tmp_path))
    assert found["name"] == "bond0"
    assert found["active"] == "ens4"
    assert found["miimon_ms"] == 100
    assert found["arp_ms"] == 0
    (tmp_path / "bond0").write_text(
        BOND.replace(
            "MII Polling Interval (ms): 100",
            "MII Polling Interval (ms): 0\nARP Polling Interval (ms): 100",
        )
    )
    assert drill.bonds(str(tmp_path))[0]["arp_ms"] == 100
    assert found["members"] == {"ens4": "up", "ens5": "down"}
    assert drill.bonds(str(tmp_path / "none")) == []
    # Every member down: the kernel names no active member, and no drill fails over to "None".
    (tmp_path / "bond0").write_text(
        BOND.replace("Active Slave: ens4", "Active Slave: None").replace("up", "down")
    )
    (down,) = drill.bonds(str(tmp_path))
    assert (down["active"], down["members"]) == ("", {"ens4": "down", "ens5": "down"})


def test_children_are_found_by_parent_pid() -> None:
    assert os.getpid() in job.children(os.getppid())
    assert os.getpid() in job.descendants(os.getppid())


def _job(tmp_path: Path) -> drill.Job:
    return drill.Job(str(tmp_path), "trainer", 20, lambda: True, list, lambda: 40, lambda: 0)


def test_preempt_needs_a_heartbeat_that_watches_a_notice(tmp_path: Path) -> None:
    config = tmp_path / "heartbeat.json"
    config.write_text(json.dumps({"probes": [{"name": "bond-peer", "type": "icmp"}]}))
    with pytest.raises(drill.DrillError, match="watches no cloud interruption notice"):
        drill.drill_preempt(_job(tmp_path), "d1", 5, 30, list, "true", str(config),
                            str(tmp_path / "none.json"))  # fmt: skip
    config.write_text("{not json")
    assert drill.notice_probe(str(config)) is None
    config.write_text(json.dumps(["a list"]))
    assert drill.notice_probe(str(config)) is None


def test_preempt_on_a_real_cloud_skips_and_says_how_to_drill_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "heartbeat.json"
    probe = {"name": "cloud-notice", "type": "spot_notice", "provider": "aws",
             "url": "http://169.254.169.254"}  # fmt: skip
    config.write_text(json.dumps({"probes": [{"name": "gpu", "type": "gpu"}, probe]}))
    record = tmp_path / "standin.json"
    terminated: list[int] = []

    def terminate() -> list[int]:
        terminated.append(1)
        return []

    # No stand-in: the heartbeat reads the cloud's own service. A stand-in whose process is
    # gone, or that serves another address, is no stand-in either.
    dead = {"provider": "aws", "url": "http://169.254.169.254:80", "notice_file": "/x",
            "pid": 2**22 + 7}  # fmt: skip
    other = {**dead, "url": "http://127.0.0.1:8080", "pid": os.getpid()}
    for text in (None, json.dumps(dead), json.dumps(other)):
        if text is None:
            record.unlink(missing_ok=True)
        else:
            record.write_text(text)
        found = drill.drill_preempt(_job(tmp_path), "d1", 5, 30, terminate, "true", str(config),
                                    str(record))  # fmt: skip
        assert found["skipped"] is True, found
        assert found["passed"] is None, found
        assert "aws:ec2:send-spot-instance-interruptions" in found["detail"], found
    assert terminated == []  # nothing was drilled
    record.write_text(json.dumps({**dead, "pid": os.getpid()}))
    assert drill.standin(str(record)) is not None


def test_a_skipped_drill_is_reported_as_a_skip_not_a_pass(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lab = tmp_path / "lab.ini"
    lab.write_text(LAB)
    skipped = {**_found("preempt", False), "passed": None, "skipped": True, "problems": [],
               "detail": "drill a reclaim with AWS Fault Injection Service's ..."}  # fmt: skip
    answers = [_found("kill", True), skipped]

    def fake(request: runner.RunRequest, on_progress: object = None) -> runner.RunResult:
        return _result([{"host": "node1", "drill": answers.pop(0)}], [])

    monkeypatch.setattr(runner, "run", fake)
    out_xml = tmp_path / "d.xml"
    code, out = invoke("drill", str(lab), "--name", "j", "--faults", "kill,preempt",
                       "--junit", str(out_xml))  # fmt: skip
    assert code == 0, out
    assert "PASSED: 1 of 2 drill(s) ran, 1 skipped (preempt)" in out, out
    assert re.search(r"preempt\s+node1\s+skip", out), out
    cases = ET.parse(out_xml).getroot().findall(".//testcase")
    assert cases[1].find("skipped") is not None


def test_disk_full_reads_the_heartbeat_and_refuses_what_it_must_not_fill(tmp_path: Path) -> None:
    config = tmp_path / "heartbeat.json"
    config.write_text(json.dumps({"probes": [
        {"name": "data-space", "type": "free_space", "path": "/data"},
        {"name": "data-write", "type": "writable", "path": "/data/probe"},
    ]}))  # fmt: skip
    assert drill.free_space_probes(str(config)) == [("data-space", "/data")]
    assert drill.grown_paths(str(config)) == []
    config.write_text(json.dumps({"probes": 7, "grow": {"volumes": [{"path": "/data"}, 3]}}))
    assert drill.free_space_probes(str(config)) == []
    assert drill.grown_paths(str(config)) == ["/data"]
    metrics = tmp_path / "hb.prom"
    metrics.write_text(
        'nodeprep_heartbeat_probe_up{probe="data-space",type="free_space"} 0.0\n'
        'nodeprep_heartbeat_probe_up{probe="root-space",type="free_space"} 1.0\n'
        'nodeprep_heartbeat_probe_up{probe="bond-peer",type="icmp"} 0.0\n'
    )
    assert drill.probes_down(str(metrics)) == {"data-space"}
    assert drill.probes_down(str(tmp_path / "none.prom")) == set()
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
        "40 22 0:25 / /run rw shared:5 - tmpfs tmpfs rw\n"
        "41 22 254:17 / /data rw,relatime shared:9 - ext4 /dev/vdb1 rw\n"
        "42 22 0:40 /@home /my\\040disk rw master:2 - btrfs /dev/vdc rw\n"
    )
    assert drill.mount_info("/data", str(mountinfo)) == ("254:17", "ext4")
    assert drill.mount_info("/my disk", str(mountinfo)) == ("0:40", "btrfs")
    assert drill.mount_info("/nowhere", str(mountinfo)) == ("", "")
    # No checkpoint yet: nothing to size the fill by, nothing to keep.
    with pytest.raises(drill.DrillError, match="has no committed checkpoint yet"):
        drill.drill_disk_full(_job(tmp_path), "d1", 5, 30, str(metrics), str(config))

    def at(run_dir: str) -> drill.Job:
        facts = {"step": 40, "bytes": 4096, "verified": True}
        return drill.Job(run_dir, "trainer", 20, lambda: True, list, lambda: 40, lambda: 0,
                         newest=lambda _n: facts)  # fmt: skip

    # The node's own filesystem is never filled, nor memory, nor one the heartbeat grows.
    with pytest.raises(drill.DrillError, match="node's system filesystem"):
        drill.drill_disk_full(at("/"), "d1", 5, 30, str(metrics), str(config))
    if drill.mount_info("/dev/shm")[1] == "tmpfs":
        with pytest.raises(drill.DrillError, match="fills only a local ext4"):
            drill.drill_disk_full(at("/dev/shm/x"), "d1", 5, 30, str(metrics), str(config))


def test_the_fill_waits_for_the_failed_save_and_a_fresh_report(tmp_path: Path) -> None:
    """What the disk-full drill looks for, fed by hand: the trainer's failed save (with the
    time it was seen, not when the fault's minimum ended) and a probe that went down after
    the fill, not one that was down already."""
    log = tmp_path / "train.log"
    log.write_text("step 40 loss=0.1 t=1.0\n")
    metrics = tmp_path / "hb.prom"
    metrics.write_text('nodeprep_heartbeat_probe_up{probe="old-space",type="free_space"} 0\n')
    fill = drill._Fill(drill.LogWatch(str(log)), ["old-space", "data-space"], str(metrics))
    fill.down_before = drill.probes_down(str(metrics))
    job = _job(tmp_path)
    assert fill.look(job) is False
    with open(log, "a") as handle:
        handle.write("2026-12-06 ERROR nodeprep.checkpoint.checkpointer: saving checkpoint "
                     "step-00000060-full in /data/c failed: [Errno 28] No space left on "
                     "device; the previous checkpoints are intact\n")  # fmt: skip
    assert fill.look(job) is False  # the save failed, the heartbeat has not said it yet
    assert fill.failed is not None
    assert fill.reported is None  # old-space was down before the fill: no report
    metrics.write_text(metrics.read_text() + 'nodeprep_heartbeat_probe_up{probe="data-space",'
                       'type="free_space"} 0\n')  # fmt: skip
    assert fill.look(job) is True
    said: list[str] = []
    assert fill.judge({"step": 40}, "/data", said) == []
    assert "No space left on device" in said[0]
    assert said[1] == "the heartbeat's data-space probe reported it"
    # A drill that saw no failed save says so.
    quiet = drill._Fill(drill.LogWatch(str(log)), [], str(metrics))
    assert quiet.look(job) is False
    assert quiet.judge({"step": 40}, "/data", []) == ["no save failed while the disk was full"]


def test_the_fault_lasts_its_duration_and_until_it_has_shown_itself(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    watch = drill.LogWatch(str(log))
    calls: list[float] = []

    def until() -> bool:
        calls.append(time.time())
        return len(calls) > 3

    began = time.time()
    drill._ride(watch, drill.Timeline(began), began, 0.2, 5.0, None, until)
    took = time.time() - began
    assert 0.2 <= took < 2, took
    assert calls[0] - began < 0.15  # looked at from the start, not once the 0.2 s minimum ended
    began = time.time()
    drill._ride(watch, drill.Timeline(began), began, 0.0, 0.3, None, lambda: False)
    assert 0.3 <= time.time() - began < 1.5  # never done: it ends at its limit


def test_refusals_that_need_a_node_are_read_from_what_the_node_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's answers stood in for (`tc`, logind, the mount table): each refusal comes
    before anything is injected, naming why."""
    calls: list[list[str]] = []

    def node(argv: list[str], timeout: float = 30) -> tuple[int, str, str]:
        calls.append(argv)
        if argv[:2] == ["tc", "qdisc"]:
            return 0, "qdisc fq 8001: root refcnt 2 limit 10000p\n", ""
        return 1, "", "no such command here"

    monkeypatch.setattr(drill, "run", node)
    monkeypatch.setattr(drill, "netem_iface", lambda: "bond0")
    with pytest.raises(drill.DrillError, match=r"bond0 has a configured root qdisc \(fq 8001:\)"):
        drill.drill_netem(_job(tmp_path), "d1", 5, 30, 50, 1.0)
    assert all(argv[:3] != ["tc", "qdisc", "add"] for argv in calls)  # nothing was added
    # No logind session of its own: ending the user's sessions could end the drill itself.
    monkeypatch.setattr(drill, "_own_session", lambda: "")
    with pytest.raises(drill.DrillError, match="drill's own login session cannot be found"):
        drill.drill_ssh_drop(_job(tmp_path), "d1", 5, 30)
    # A data disk the heartbeat may grow: a fill would grow the volume for real.
    config = tmp_path / "heartbeat.json"
    config.write_text(json.dumps({"grow": {"volumes": [{"path": "/data"}]}}))
    monkeypatch.setattr(drill, "mount_point", lambda path: "/data" if "data" in path else "/")
    devices = {"/data": ("254:17", "ext4"), "/": ("254:1", "ext4")}
    monkeypatch.setattr(drill, "mount_info", lambda mount: devices[mount])
    facts = {"step": 40, "bytes": 4096, "verified": True}
    grown = drill.Job("/data/jobs/j", "trainer", 20, lambda: True, list, lambda: 40, lambda: 0,
                      newest=lambda _n: facts)  # fmt: skip
    with pytest.raises(drill.DrillError, match="growth action may grow the volume at /data"):
        drill.drill_disk_full(grown, "d1", 5, 30, str(tmp_path / "none.prom"), str(config))
    config.write_text(json.dumps({"grow": {"volumes": [{"path": "/scratch"}]}}))
    monkeypatch.setattr(drill, "mount_info", lambda mount: ("254:1", "ext4"))  # /'s device
    with pytest.raises(drill.DrillError, match="node's system filesystem"):
        drill.drill_disk_full(grown, "d1", 5, 30, str(tmp_path / "none.prom"), str(config))


def test_reboot_runs_without_mitogen_and_the_other_faults_with_it(
    monkeypatch: pytest.MonkeyPatch, fleet: Path
) -> None:
    """Ansible's reboot waits for the new boot over plain ssh: --fast leaves that run alone."""
    seen: list[runner.RunRequest] = []

    def fake(request: runner.RunRequest, on_progress: object = None) -> runner.RunResult:
        seen.append(request)
        fault = request.extra_vars["job_drill_fault"]
        return _result([{"host": "gpu01", "drill": _found(fault, True)}], [])

    monkeypatch.setattr(runner, "run", fake)
    monkeypatch.setattr("nodeprep.cli.job.refuse_fast_without_mitogen", lambda fast: None)
    code, out = invoke("drill", str(fleet), "--name", "j", "--faults", "kill,reboot", "--yes",
                       "--fast")  # fmt: skip
    assert code == 0, out
    assert [(r.extra_vars["job_drill_fault"], r.fast) for r in seen] == [
        ("kill", True), ("reboot", False)]  # fmt: skip


def _append(log: Path, text: str, after_s: float = 0.0) -> threading.Thread:
    def write() -> None:
        time.sleep(after_s)
        with open(log, "a") as handle:
            handle.write(text)

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_reboot_is_armed_then_judged_across_the_boot(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The arm records what the job reached where the boot keeps it; the judge reads the log
    across the boot: the steps made until the shutdown, the start at boot, the resume."""
    run_dir, root = tmp_path / "job", tmp_path / "drills"
    run_dir.mkdir()
    log = run_dir / "train.log"
    log.write_text("start step=0 resumed=False\nstep 1 loss=0.1 t=1.0\n")
    target = drill.Job(str(run_dir), "trainer", 20, lambda: True, list, lambda: 40, lambda: 2)
    monkeypatch.setattr(drill, "boot_id", lambda path="": "aaaa-1111")
    with pytest.raises(drill.DrillError, match="no enabled boot unit"):
        drill.drill_reboot_arm(target, "r1", 5, "nodeprep-job-j.service", False, str(root))
    asked = time.time()
    _append(log, f"step 47 loss=0.1 t={asked + 0.1}\n", 0.2)
    record = drill.drill_reboot_arm(target, "r1", 5, "nodeprep-job-j.service", True, str(root))
    assert (record["step_at_fault"], record["committed_at_fault"]) == (47, 40)
    assert (record["boot_id"], record["emergencies"]) == ("aaaa-1111", 2)
    assert json.loads((root / "reboot-r1.json").read_text())["log_offset"] == log.stat().st_size
    # Until the shutdown (a torchrun restart on the way, then the heartbeat's save), then the
    # boot: the shutdown's SIGTERM saved step 49, and the job started in the new boot.
    with open(log, "a") as handle:
        handle.write(f"start step=40 resumed=True\nstep 48 loss=0.1 t={asked + 1}\n"
                     f"step 49 loss=0.1 t={asked + 2}\nnodeprep: job j exited 143\n"
                     "2026-12-06T10:00:00+00:00 nodeprep: job j starting (boot bbbb-2222)\n"
                     "start step=49 resumed=True\n")  # fmt: skip
    heartbeat = {"signal": "SIGUSR1", "step": 48, "signal_time": asked + 1.1,
                 "committed_time": asked + 1.2}  # fmt: skip
    save = {"signal": "SIGTERM", "step": 49, "signal_time": asked + 2.1,
            "committed_time": asked + 2.4}  # fmt: skip
    (run_dir / "emergency.jsonl").write_text(
        "{}\n{}\n" + json.dumps(save) + "\n" + json.dumps(heartbeat) + "\n"
    )
    monkeypatch.setattr(drill, "boot_id", lambda path="": "bbbb-2222")
    monkeypatch.setattr(drill, "unit_started", lambda unit: record["asked_at"] + 40.0)
    monkeypatch.setattr(drill, "snapshot", lambda iface="": record["snapshot"])
    writer = _append(log, f"step 50 loss=0.1 t={record['asked_at'] + 70}\n", 0.3)
    found = drill.drill_reboot_judge(target, "r1", 10, "nodeprep-job-j.service", True, str(root))
    writer.join()
    assert found["passed"], found
    assert (found["step_at_fault"], found["resumed_from"], found["steps_lost"]) == (49, 49, 0)
    assert (found["detected_by"], found["detect_s"]) == ("boot unit", 40.0)
    assert found["checkpoint_s"] == pytest.approx(0.3, abs=0.01)
    assert found["next_step_s"] == pytest.approx(70, abs=0.01)
    assert "the shutdown's SIGTERM saved step 49" in found["detail"], found
    assert not (root / "reboot-r1.json").exists()
    with pytest.raises(drill.DrillError, match="no reboot drill r1 was armed"):
        drill.drill_reboot_judge(target, "r1", 1, "nodeprep-job-j.service", True, str(root))


def test_a_reboot_that_did_not_happen_or_a_job_that_did_not_come_back_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run_dir, root = tmp_path / "job", tmp_path / "drills"
    run_dir.mkdir()
    log = run_dir / "train.log"
    log.write_text("step 1 loss=0.1 t=1.0\n")
    alive = [True]
    target = drill.Job(str(run_dir), "trainer", 20, lambda: alive[0], list, lambda: None,
                       lambda: 0)  # fmt: skip
    monkeypatch.setattr(drill, "boot_id", lambda path="": "same")
    monkeypatch.setattr(drill, "unit_started", lambda unit: None)
    _append(log, f"step 2 loss=0.1 t={time.time() + 1}\n", 0.2)
    drill.drill_reboot_arm(target, "r2", 5, "u.service", True, str(root))
    alive[0] = False
    found = drill.drill_reboot_judge(target, "r2", 0.5, "u.service", False, str(root))
    assert found["passed"] is False
    problems = "; ".join(found["problems"])
    assert "the node did not reboot" in problems
    assert "the job did not start again within 0.5 s" in problems
    assert "the boot unit u.service is no longer enabled" in problems
    assert "the job is not running" in problems


def test_a_job_that_started_again_from_scratch_fails_and_its_next_step_is_still_timed(
    tmp_path: Path,
) -> None:
    """The preempt and reboot drills' wait for the resume: a start without a checkpoint is
    the one problem (the job did step: no "made no step" on top of it)."""
    log = tmp_path / "train.log"
    log.write_text("step 40 loss=0.1 t=1.0\n")
    watch = drill.LogWatch(str(log))
    began = time.time()
    timeline = drill.Timeline(began)
    log.write_text(f"step 40 loss=0.1 t=1.0\nstart step=0 resumed=False\n"
                   f"step 1 loss=0.1 t={began + 3}\n")  # fmt: skip
    result: dict[str, Any] = {"problems": []}
    said = drill._came_back(result, timeline, watch, 40, 5.0, "", began)
    assert said == "started again from scratch"
    assert result["problems"] == ["the job started again from scratch, not from a checkpoint"]
    assert (result["resumed_from"], result["next_step_s"]) == (0, 3.0)
    assert "steps_lost" not in result


def test_a_notice_that_cannot_be_posted_is_one_sentence(tmp_path: Path) -> None:
    """The stand-in's notice file in a directory that is not there: a refusal naming it (the
    lab's stand-in once lost that directory), not a traceback."""
    (tmp_path / "train.log").write_text("")
    reclaim = drill._Reclaim(_job(tmp_path), drill.LogWatch(str(tmp_path / "train.log")), 0)
    notice = str(tmp_path / "gone" / "cloud-notice")
    with pytest.raises(drill.DrillError, match=f"cannot post the notice at {notice}"):
        reclaim.notice_then_sigterm(notice, "posted\n", 1, 1, list)


def _training(log: Path, stop: threading.Event) -> None:
    """A job's log: a step every 50 ms, as the reference trainer writes them."""
    step = 40
    while not stop.is_set():
        step += 1
        with log.open("a") as handle:
            handle.write(f"step {step} loss=0.5 t={time.time():.3f}\n")
        time.sleep(0.05)


@pytest.mark.parametrize(("arp_ms", "undone"), [(0, True), (100, True), (100, False)])
def test_blackhole_drops_the_active_members_traffic_and_only_arp_monitoring_notices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arp_ms: int, undone: bool
) -> None:
    """The node stood in for: `tc` keeps its qdiscs and records what it is asked, the bond
    (as /proc/net/bonding shows it) fails over while the drop is on only when it probes with
    ARP, and the undo removes the clsact qdisc (or, once, fails to)."""
    calls: list[list[str]] = []
    hooked: set[str] = set()
    dropping = threading.Event()
    undo: list[str] = []

    def node(argv: list[str], timeout: float = 30) -> tuple[int, str, str]:
        calls.append(argv)
        if argv[:3] == ["tc", "qdisc", "show"]:
            extra = "qdisc clsact ffff: parent ffff:fff1\n" if argv[-1] in hooked else ""
            return 0, f"qdisc mq 0: root\nqdisc fq_codel 0: parent :1 limit 10240p\n{extra}", ""
        if argv[:3] == ["tc", "qdisc", "add"]:
            hooked.add(argv[4])
        if argv[:2] == ["tc", "filter"]:
            dropping.set()
        return 0, "", ""

    def bonds() -> list[dict[str, Any]]:
        active = "ens5" if dropping.is_set() and arp_ms else "ens4"
        return [{"name": "bond0", "mode": "fault-tolerance (active-backup)", "active": active,
                 "miimon_ms": 0 if arp_ms else 100, "arp_ms": arp_ms,
                 "members": {"ens4": "up", "ens5": "up"}}]  # fmt: skip

    def undo_now(self: drill.Undo) -> tuple[int, str]:
        dropping.clear()
        if undone:
            hooked.clear()
        return 0, ""

    monkeypatch.setattr(drill, "run", node)
    monkeypatch.setattr(drill, "bonds", bonds)
    monkeypatch.setattr(drill.Undo, "arm", lambda self: undo.append(self.script))
    monkeypatch.setattr(drill.Undo, "now", undo_now)
    monkeypatch.setattr(drill, "SETTLE_S", 1)
    stop = threading.Event()
    writer = threading.Thread(target=_training, args=(tmp_path / "train.log", stop))
    writer.start()
    try:
        result = drill.drill_blackhole(_job(tmp_path), "d1", 0.4, 5)
    finally:
        stop.set()
        writer.join()
    assert [argv for argv in calls if argv[:3] != ["tc", "qdisc", "show"]] == [
        ["tc", "qdisc", "add", "dev", "ens4", "clsact"],
        ["tc", "filter", "add", "dev", "ens4", "ingress", "matchall", "action", "drop"],
        ["tc", "filter", "add", "dev", "ens4", "egress", "matchall", "action", "drop"],
    ]
    assert "tc qdisc del dev ens4 clsact" in undo[0]
    assert result["steps_lost"] == 0, result
    if not undone:  # the filters stayed: the node is not as it was, and the drill says so
        assert result["passed"] is False
        assert result["restored"] is False
        assert result["left"] == ["tc filter hooks on ['ens4'] where they were on []"]
        return
    assert result["restored"] is True, result
    if arp_ms:
        assert result["passed"] is True, result
        assert result["detected_by"] == "bond"
        assert "ARP monitoring every 100 ms" in result["detail"]
    else:
        assert result["passed"] is False
        assert result["detected_by"] == ""
        assert result["problems"] == [
            "bond bond0 did not notice: MII monitoring watches the carrier only, and the link "
            "stayed up; set nic_bond_arp_interval (and nic_bond_arp_ip_targets) so that the "
            "bond probes its peer"
        ]


def test_blackhole_leaves_a_member_with_tc_filters_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def node(argv: list[str], timeout: float = 30) -> tuple[int, str, str]:
        calls.append(argv)
        return 0, "qdisc fq_codel 0: root\nqdisc clsact ffff: parent ffff:fff1\n", ""

    monkeypatch.setattr(drill, "run", node)
    monkeypatch.setattr(drill, "bonds", lambda: [{
        "name": "bond0", "active": "ens4", "miimon_ms": 0, "arp_ms": 100,
        "members": {"ens4": "up", "ens5": "up"}}])  # fmt: skip
    with pytest.raises(drill.DrillError, match="ens4 already has a clsact or ingress qdisc;"):
        drill.drill_blackhole(_job(tmp_path), "d1", 5, 30)
    assert calls == [["tc", "qdisc", "show", "dev", "ens4"]]
    monkeypatch.setattr(drill, "bonds", lambda: [{
        "name": "bond0", "active": "ens4", "miimon_ms": 100, "arp_ms": 0,
        "members": {"ens4": "up", "ens5": "down"}}])  # fmt: skip
    with pytest.raises(drill.DrillError, match="no bond with two members up"):
        drill.drill_blackhole(_job(tmp_path), "d1", 5, 30)
