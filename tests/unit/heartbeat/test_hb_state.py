"""Hysteresis of one probe: N failures to fail, M successes to recover, notices at once."""

from __future__ import annotations

from nodeprep.heartbeat.probes import Outcome
from nodeprep.heartbeat.state import ProbeState, State, Transition, node_state

OK = Outcome(True, "ok", 0.01)
BAD = Outcome(False, "refused", 0.0)
NOTICE = Outcome(False, "spot notice", 0.01, notice=True)
SKIP = Outcome(True, "skipped: no NVIDIA driver", 0.0, skipped=True)


def test_fails_after_threshold_and_recovers_after_successes() -> None:
    st = ProbeState(fail_threshold=3, recover_threshold=2)
    assert st.observe(BAD) is None
    assert st.state is State.SUSPECT
    assert st.observe(BAD) is None
    assert st.observe(BAD) is Transition.FAILED
    assert st.state is State.FAILED
    assert st.observe(BAD) is None
    assert st.observe(OK) is None
    assert st.state is State.FAILED
    assert st.observe(BAD) is None
    assert st.observe(OK) is None
    assert st.observe(OK) is Transition.RECOVERED
    assert st.state is State.HEALTHY


def test_single_blips_never_trip() -> None:
    st = ProbeState(fail_threshold=3, recover_threshold=2)
    for _ in range(50):
        assert st.observe(BAD) is None
        assert st.observe(BAD) is None
        assert st.observe(OK) is None
        assert st.state is State.HEALTHY


def test_notice_trips_at_once_and_skips_are_neutral() -> None:
    st = ProbeState(fail_threshold=3, recover_threshold=1)
    assert st.observe(NOTICE) is Transition.FAILED
    assert st.observe(OK) is Transition.RECOVERED
    assert st.observe(SKIP) is None
    assert st.state is State.SKIPPED
    assert node_state([State.SKIPPED, State.HEALTHY]) is State.HEALTHY
    assert node_state([State.SUSPECT, State.HEALTHY]) is State.SUSPECT
    assert node_state([State.SUSPECT, State.FAILED]) is State.FAILED
    assert node_state([State.SKIPPED]) is State.SKIPPED
