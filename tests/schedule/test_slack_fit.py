"""Slack-aware placement: with an operating point that places by slack, an arrival goes to
the busiest instance it fits with headroom, so a light instance stays light for a request
whose SLO needs it; without it (or with another dispatch) the lowest step latency wins."""

from __future__ import annotations

import pytest

from dilaserve.control.config import ControlConfig
from dilaserve.control.operating_point import OperatingPoint
from dilaserve.schedule.config import SchedulerConfig
from tests.builders.schedule import arrive, cluster, finish_step, spec
from tests.control.builders import make_request

FIT = ControlConfig(operating_point=OperatingPoint.adaptive().with_fit(True))


def _alone_s(sched, req) -> float:
    sched.controller.prepare_arrival(req, 0.0)
    return sched.controller.fastest_alone_s(req, (1,))[0]


def _two_instances(control: ControlConfig, policy: str = "dilaserve-no-reconfig"):
    return cluster(policy, [spec("a", max_batch=100_000), spec("b", max_batch=100_000)], control=control)


@pytest.mark.parametrize("fit", [True, False])
def test_requests_with_slack_share_an_instance_only_when_placed_by_slack(fit):
    sched, _ = _two_instances(FIT if fit else ControlConfig())
    first = arrive(sched, make_request("loose-0", slo=100.0))
    second = arrive(sched, make_request("loose-1", slo=100.0))
    assert first.instance == "a"
    assert second.instance == ("a" if fit else "b")


def test_a_tight_request_finds_the_light_instance_the_loose_ones_left():
    sched, _ = _two_instances(FIT)
    for i in range(3):
        assert arrive(sched, make_request(f"loose-{i}", slo=100.0)).instance == "a"
    probe = make_request("probe")
    alone = _alone_s(sched, probe)
    # An SLO it makes with the default headroom alone, but not beside the three loose ones.
    tight = arrive(sched, make_request("tight", slo=2.2 * alone))
    assert tight.instance == "b"
    assert not sched.controller.fits(
        tight, sched._placement(0, tight), 0.0, sched._members(0), SchedulerConfig().fit_headroom
    )


def test_a_request_that_fits_nowhere_goes_to_the_lowest_latency_and_admission_decides():
    sched, _ = _two_instances(FIT)
    arrive(sched, make_request("loose-0", slo=100.0))
    probe = make_request("probe")
    alone = _alone_s(sched, probe)
    # Within its SLO alone, but not with half of it kept free: the fallback places it on the
    # idle instance, where admission takes it.
    edge = arrive(sched, make_request("edge", slo=1.2 * alone))
    assert edge.instance == "b" and "edge" in sched.requests


@pytest.mark.parametrize("fit_after", [True, False])
def test_placed_by_slack_a_request_does_not_move_to_a_faster_instance(fit_after):
    sched, be = _two_instances(FIT)
    reqs = [arrive(sched, make_request(f"loose-{i}", slo=100.0)) for i in range(3)]
    assert {r.instance for r in reqs} == {"a"}
    if not fit_after:
        sched.controller.set_point(OperatingPoint.adaptive())
    finish_step(sched, be, "a", 0.1, k=32)  # each finishes its first block: a recompute step is next
    moved = sum(r.instance == "b" for r in reqs)
    assert (moved == 0) if fit_after else (moved > 0 and sched.migrations == moved)


def test_fit_headroom_is_validated_with_a_fix():
    with pytest.raises(ValueError, match="fit_headroom=1.0 must lie in"):
        SchedulerConfig(fit_headroom=1.0)
