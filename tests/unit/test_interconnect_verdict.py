"""The interconnect check's figures and verdict: bus bandwidth as nccl-tests defines it, the
limits named with the figure that broke them, and a failed run's most telling line."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from collection_plugins import module_utils
from nodeprep.interconnect import bus_bandwidth_gbps

ic = module_utils("interconnect")


def figures(busbw: float = 2.0, latency_ms: float = 0.5, nodes: int = 2) -> dict[str, object]:
    large = {"bytes": 16 << 20, "time_ms": 70.0, "algbw_gbps": busbw, "busbw_gbps": busbw}
    small = {"bytes": 4096, "time_ms": latency_ms, "algbw_gbps": 0.1, "busbw_gbps": 0.1}
    return {"backend": "gloo", "ranks": nodes, "nodes": nodes, "host": "a",
            "latency_ms": latency_ms, "sizes": [large, small]}  # fmt: skip


def test_bus_bandwidth_is_the_ring_traffic_per_link() -> None:
    # 1 GB in 1 s: 8 Gbit/s of algorithm bandwidth; 2 (n - 1) / n of it on each link.
    assert bus_bandwidth_gbps(10**9, 1.0, 2) == (8.0, 8.0)
    algbw, busbw = bus_bandwidth_gbps(10**9, 2.0, 4)
    assert (algbw, busbw) == (4.0, 6.0)


def test_figures_within_the_limits_pass_and_are_all_in_the_detail() -> None:
    verdict = ic.judge(figures(), 1.0, 10.0, 2)
    assert verdict["check"] == "interconnect.allreduce"
    assert verdict["passed"] is True
    assert (
        "all-reduce among 2 nodes (2 ranks, gloo): bus bandwidth 2 Gbit/s at 16 MiB (min 1)"
        in verdict["detail"]
    )
    assert "latency 0.5 ms at 4 KiB (max 10)" in verdict["detail"]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"busbw": 0.5},
         "bus bandwidth 0.5 Gbit/s at 16 MiB is below interconnect_min_busbw_gbps 1"),
        ({"latency_ms": 25.0}, "latency 25 ms at 4 KiB is above interconnect_max_latency_ms 10"),
        ({"nodes": 1}, "1 nodes took part, not the 2 selected"),
    ],
)  # fmt: skip
def test_a_figure_past_its_limit_fails_naming_both(given: dict[str, float], said: str) -> None:
    verdict = ic.judge(figures(**given), 1.0, 10.0, 2)  # type: ignore[arg-type]
    assert verdict["passed"] is False
    assert verdict["detail"].startswith(said), verdict["detail"]


def test_a_limit_of_zero_is_not_checked() -> None:
    assert ic.judge(figures(busbw=0.001, latency_ms=900.0), 0.0, 0.0, 2)["passed"] is True


def test_the_figures_are_the_last_json_line_with_sizes() -> None:
    text = "warning: something\n" + json.dumps(figures()) + '\n{"other": 1}\nbye\n'
    assert ic.figures_from(text) == figures()
    assert ic.figures_from("no json here\n{broken") is None


# torchrun's output when a worker raised, as torch 2.13 prints it (shortened).
WORKER_FAILED = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/opt/nodeprep/lib/nodeprep/interconnect.py", line 117, in main
[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3360, \
unhandled system error
E1205 13:30:01.000000 1 torch/distributed/elastic/multiprocessing/api.py:900] failed (exitcode: 1)
Traceback (most recent call last):
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
"""  # fmt: skip


@pytest.mark.parametrize(
    ("stderr", "said"),
    [
        ("[W] unrelated\ntorch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n"
         "  File x\n", "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"),
        (WORKER_FAILED, "[rank1]: torch.distributed.DistBackendError: NCCL error in:"),
        ("/usr/bin/python3: No module named nodeprep.interconnect\nChildFailedError:\n",
         "/usr/bin/python3: No module named nodeprep.interconnect (an image built before this "
         "check: build and provision it again)"),
        ("[rank0]: torch.distributed.DistStoreError: wait timeout after 30000ms\n",
         "[rank0]: torch.distributed.DistStoreError: wait timeout"),
        ("", "no output"),
    ],
)  # fmt: skip
def test_a_failed_run_is_told_by_its_most_telling_line(stderr: str, said: str) -> None:
    assert ic.why_failed(1, "", stderr).startswith(said)


@pytest.mark.parametrize(
    ("value", "status"),
    [(0, 0), ("0", 0), (" 124 ", 124), (1, 1), (None, None), ("", None), ("None", None),
     (True, None)],
)  # fmt: skip
def test_an_exit_status_reads_the_same_rendered_natively_or_as_text(
    value: object, status: int | None
) -> None:
    """ansible-core 2.19 keeps a task result's rc an int; older versions render it as text,
    and a command that never reported one as ""."""
    assert ic.exit_status(value) == status


def test_sizes_read_as_people_write_them() -> None:
    assert [ic.size_text(n) for n in (4096, 1 << 20, 16 << 20, 1000)] == [
        "4 KiB", "1 MiB", "16 MiB", "1000 B"]  # fmt: skip


def test_the_measurement_refuses_bad_sizes_and_a_start_outside_torchrun(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from nodeprep import interconnect

    assert interconnect._sizes("16777216,4096,4096") == [4096, 16777216]
    with pytest.raises(argparse.ArgumentTypeError, match="at least 4"):
        interconnect._sizes("4096,2")
    monkeypatch.delenv("RANK", raising=False)
    assert interconnect.main(["--iters", "1"]) == 2
    assert "run this under torchrun" in capsys.readouterr().err
    assert interconnect.main(["--iters", "0"]) == 2


def test_one_rank_measures_every_size_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """A group of one (gloo on 127.0.0.1): real collectives, each size once, no bus traffic."""
    import socket

    import torch.distributed as dist

    from nodeprep import interconnect

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        found = interconnect.measure([4096, 10], 2, 1, torch.device("cpu"))
    finally:
        dist.destroy_process_group()
    assert [s["bytes"] for s in found] == [4096, 8]  # whole float32 elements
    assert all(s["time_ms"] > 0 and s["busbw_gbps"] == 0 for s in found)
