"""The loop end to end in-process: detection, recovery, no false trips, hung endpoints."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hb_endpoints import Endpoint
from hb_support import RunningDaemon, wait_for


def _probe(endpoint: Endpoint, name: str = "web", **kw: Any) -> dict[str, Any]:
    probe = {
        "name": name,
        "type": "http",
        "url": f"{endpoint.url}/health",
        "interval": 0.4,
        "timeout": 0.4,
        "fail_threshold": 3,
        "recover_threshold": 2,
    }
    probe.update(kw)
    return probe


def _runs(observed: list[tuple[float, str, bool, str]], probe: str) -> list[tuple[bool, str]]:
    return [(ok, state) for _, name, ok, state in observed if name == probe]


def test_detects_after_n_failures_and_recovers_after_m_successes(
    endpoint: Endpoint, run_daemon: Callable[..., RunningDaemon]
) -> None:
    hb = run_daemon({"probes": [_probe(endpoint)]})
    wait_for(lambda: hb.state("web") == "healthy" and hb.observed, 5, "first success")
    endpoint.set_mode("refuse")
    wait_for(lambda: hb.trips, 5, "a trip")
    endpoint.set_mode("ok")
    wait_for(lambda: hb.daemon.actions.ledger.total.get("recover"), 5, "recovery")
    seq = _runs(hb.observed, "web")
    first_fail = next(i for i, (ok, _) in enumerate(seq) if not ok)
    assert [s for _, s in seq[first_fail : first_fail + 3]] == ["suspect", "suspect", "failed"]
    first_ok = next(i for i in range(first_fail, len(seq)) if seq[i][0])
    assert [s for _, s in seq[first_ok : first_ok + 2]] == ["failed", "healthy"]
    assert len(hb.trips) == 1
    assert "connection refused" in hb.trips[0][2]


def test_slow_but_ok_and_single_blips_never_trip(
    endpoint: Endpoint, run_daemon: Callable[..., RunningDaemon]
) -> None:
    endpoint.slow_s = 0.15
    # A blip lasts until the test sees it (20 ms polls), well under two retries.
    hb = run_daemon({"probes": [_probe(endpoint, retry_interval=0.3)]})
    endpoint.set_mode("slow")
    time.sleep(2.0)
    for _ in range(4):
        endpoint.set_mode("error")
        wait_for(lambda: hb.state("web") == "suspect", 6, "a blip to be seen")
        endpoint.set_mode("slow")
        wait_for(lambda: hb.state("web") == "healthy", 6, "the blip to clear")
    assert hb.trips == []
    seq = _runs(hb.observed, "web")
    assert sum(1 for ok, _ in seq if not ok) >= 4
    assert sum(1 for ok, _ in seq if ok) >= 6


def test_spot_notice_trips_on_first_sight(
    endpoint: Endpoint, run_daemon: Callable[..., RunningDaemon]
) -> None:
    hb = run_daemon(
        {
            "probes": [
                {
                    "name": "spot",
                    "type": "spot_notice",
                    "url": endpoint.url,
                    "interval": 0.3,
                    "timeout": 0.2,
                    "fail_threshold": 5,
                }
            ]
        }
    )
    wait_for(lambda: hb.observed, 5, "first answer")
    endpoint.set_mode("spot")
    wait_for(lambda: hb.trips, 3, "a trip on the notice")
    assert len(hb.trips) == 1
    assert "spot instance-action notice" in hb.trips[0][2]
    # The trip fires inside the observation, which is recorded just after it returns.
    wait_for(lambda: any(not ok for ok, _ in _runs(hb.observed, "spot")), 3, "the observation")
    assert next(s for ok, s in _runs(hb.observed, "spot") if not ok) == "failed"


def test_a_hung_endpoint_stalls_neither_the_loop_nor_other_probes(
    endpoint: Endpoint, run_daemon: Callable[..., RunningDaemon]
) -> None:
    other = Endpoint().start()
    try:
        hb = run_daemon(
            {
                "probes": [
                    _probe(endpoint, "hung"),
                    {
                        "name": "gw",
                        "type": "tcp",
                        "host": "127.0.0.1",
                        "port": other.port,
                        "interval": 0.3,
                        "timeout": 0.2,
                    },
                ]
            }
        )
        wait_for(lambda: hb.observed, 5, "first answer")
        endpoint.set_mode("hang")
        start = time.time()
        time.sleep(3.0)
        during = [(n, ok) for t, n, ok, _ in hb.observed if t > start + 0.3]
        assert sum(1 for n, ok in during if n == "gw" and ok) >= 4
        assert sum(1 for n, ok in during if n == "hung" and not ok) >= 4
        assert hb.state("hung") == "failed"
        assert hb.state("gw") == "healthy"
    finally:
        other.stop()


def test_a_failure_is_retried_soon_so_an_outage_trips_in_retries_not_intervals(
    endpoint: Endpoint, run_daemon: Callable[..., RunningDaemon]
) -> None:
    probe = _probe(endpoint, interval=3.0, timeout=0.3, retry_interval=0.1)
    hb = run_daemon({"probes": [probe]})
    wait_for(lambda: hb.observed, 5, "first answer")
    endpoint.set_mode("refuse")
    wait_for(lambda: _runs(hb.observed, "web")[-1][1] == "failed", 6, "a trip")
    fails = [t for t, name, ok, _ in hb.observed if name == "web" and not ok]
    # Three failures 0.1 s apart, not 3 s apart (the interval): about 0.2 s in all.
    assert len(fails) >= 3
    assert fails[2] - fails[0] < 1.0, fails


def test_a_hung_retry_counts_once_past_its_deadline_and_a_slow_one_not_at_all(
    endpoint: Endpoint, run_daemon: Callable[..., RunningDaemon]
) -> None:
    endpoint.slow_s = 0.25  # well inside the timeout, even with the daemon and server on a busy GIL
    probe = _probe(endpoint, interval=3.0, timeout=0.9, retry_interval=0.1)
    hb = run_daemon({"probes": [probe]})
    wait_for(lambda: hb.observed, 5, "first answer")
    # One failure, then retries that answer slowly but within the timeout: no more failures.
    endpoint.set_mode("error")
    wait_for(lambda: hb.state("web") == "suspect", 5, "the failure")
    endpoint.set_mode("slow")
    wait_for(lambda: hb.state("web") == "healthy", 5, "the slow retry to answer")
    assert hb.trips == []
    assert sum(1 for _, name, ok, _ in hb.observed if name == "web" and not ok) == 1
    # A hang: the deadline is one failure, each retry past it one more; a trip well
    # before the 3 s interval would have given a second attempt.
    endpoint.set_mode("hang")
    mark = time.time()
    wait_for(lambda: _runs(hb.observed, "web")[-1][1] == "failed", 8, "a trip on the hang")
    fails = [(t, s) for t, name, ok, s in hb.observed if name == "web" and not ok and t > mark]
    assert [s for _, s in fails[:3]] == ["suspect", "suspect", "failed"]
    assert fails[2][0] - fails[0][0] < 1.0, fails


def test_one_lost_answer_is_covered_by_a_hedge_and_never_counts(
    endpoint: Endpoint, run_daemon: Callable[..., RunningDaemon]
) -> None:
    hb = run_daemon({"probes": [_probe(endpoint, interval=3.0, timeout=1.0, retry_interval=0.4)]})
    wait_for(lambda: hb.observed, 5, "first answer")
    before = endpoint.gets
    endpoint.set_mode("hang")
    wait_for(lambda: endpoint.gets > before, 6, "an attempt to hang")
    # The endpoint answers again, but that one request stays unanswered (not released):
    # a lost packet. The hedge 0.4 s later is answered; the lost attempt's timeout is not
    # a failure, because an answer came after it started.
    endpoint.mode = "ok"
    wait_for(lambda: len(_runs(hb.observed, "web")) >= 3, 10, "later answers")
    time.sleep(1.2)  # past the lost attempt's deadline
    assert [ok for ok, _ in _runs(hb.observed, "web")] == [True] * len(_runs(hb.observed, "web"))
    assert hb.trips == []


def test_a_slow_healthy_endpoint_gets_hedges_that_all_answer(
    endpoint: Endpoint, run_daemon: Callable[..., RunningDaemon]
) -> None:
    endpoint.slow_s = 0.3
    endpoint.set_mode("slow")
    hb = run_daemon({"probes": [_probe(endpoint, interval=1.0, timeout=0.9, retry_interval=0.1)]})
    time.sleep(3.5)
    seen = _runs(hb.observed, "web")
    assert seen, "no answer"
    assert all(ok for ok, _ in seen), seen
    # Three attempts in flight at most (fail_threshold): about 3 answers per interval.
    assert 6 <= len(seen) <= 12, len(seen)
    assert hb.trips == []
