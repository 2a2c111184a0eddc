"""The /health verdicts from the step loop's progress, without a server."""

import pytest

from dilaserve.serve.config import ServeConfig
from dilaserve.serve.health import judge, stalled_for

CFG = ServeConfig(stall_degraded_s=5, stall_unavailable_s=30)


def test_a_stall_counts_only_while_requests_wait_and_from_the_later_of_step_and_arrival():
    assert stalled_for(100.0, 0, 10.0, 20.0) == 0.0  # idle: nothing waits
    assert stalled_for(100.0, 2, 90.0, 20.0) == 10.0  # an idle hour is not a stall
    assert stalled_for(100.0, 2, 10.0, 95.0) == 5.0  # since the last step
    assert stalled_for(100.0, 1, 99.0, None) == 1.0  # no step yet


@pytest.mark.parametrize(
    "stalled, status, code",
    [(0.0, "ok", 200), (4.9, "ok", 200), (5.0, "degraded", 200), (29.0, "degraded", 200), (30.0, "unavailable", 503)],
)
def test_the_verdict_follows_the_two_budgets(stalled, status, code):
    h = judge(None, 3, stalled, CFG)
    assert (h.status, h.http_status) == (status, code)
    assert (h.reason is None) == (status == "ok")
    if h.reason:
        assert f"{stalled:.1f} s while 3 request(s) wait" in h.reason


def test_not_ready_wins_over_the_stall():
    h = judge("shutting down", 3, 0.0, CFG)
    assert (h.status, h.reason, h.http_status) == ("unavailable", "shutting down", 503)


@pytest.mark.parametrize("stalled, status", [(1.5, "ok"), (2.0, "degraded"), (9.9, "degraded"), (10.0, "unavailable")])
def test_by_default_a_two_second_stall_is_degraded_and_ten_seconds_unavailable(stalled, status):
    """A step of a full batch of the embedded model takes well under a second: a stall of a
    few seconds while requests wait is worth reporting, one of ten is worth routing around."""
    h = judge(None, 1, stalled, ServeConfig())
    assert h.status == status
    if status != "ok":
        flag = "--stall-degraded-s 2" if status == "degraded" else "--stall-unavailable-s 10"
        assert flag in h.reason
