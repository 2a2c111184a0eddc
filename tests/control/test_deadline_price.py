"""The price of capacity with SLO tiers: the work due by each deadline must fit the
throughput times the time left to it, earliest deadline first."""

import numpy as np
import pytest

from dilaserve.control import ControlConfig, ThresholdController
from dilaserve.control.capacity_price import Deadlines, deadline_caps, price_caps
from dilaserve.profile.types import LatencyProfile, StepCurve
from tests.control.builders import TablePredictor, make_request

FLAT = np.array([0.755, 0.7625, 0.77, 0.7775, 0.785])
WORK = 400.0 + 32.0 * np.array([3.5, 4.2, 5.3, 6.6, 9.0])
NO_ARRIVALS = np.zeros(0)


def _rows(n):
    return np.tile(WORK, (n, 1)), np.ones((n, 5), dtype=bool), np.full(n, 4)


def _deadlines(time_left, throughput=1.0):
    return Deadlines(np.asarray(time_left, dtype=float), throughput, NO_ARRIVALS, 100.0)


def test_an_early_deadline_drops_the_requests_due_by_it_and_no_other():
    load, allowed, caps = _rows(3)
    # Two requests due in 1 s, one in 100 s; 1,200 token-steps/s. The horizon (100 s) holds
    # everything at the highest threshold, but the two due first need 2 x 688 by 1 s.
    dl = _deadlines([1.0, 1.0, 100.0], throughput=1200.0)
    horizon = 1200.0 * 100.0
    assert (price_caps(FLAT, load, allowed, caps, horizon) == 4).all()
    out = price_caps(FLAT, load, allowed, caps, horizon, deadlines=dl)
    assert out[2] == 4, "the request due last keeps its threshold"
    assert (out[:2] < 4).all() and load[[0, 1], out[:2]].sum() <= 1200.0
    # The smallest price that fits: one step higher would not.
    assert load[[0, 1], np.minimum(out[:2] + 1, 4)].sum() > 1200.0


def test_the_walk_is_earliest_deadline_first_whatever_the_row_order():
    load, allowed, caps = _rows(3)
    dl = _deadlines([100.0, 1.0, 1.0], throughput=1200.0)
    out = price_caps(FLAT, load, allowed, caps, 1200.0 * 100.0, deadlines=dl)
    assert out[0] == 4 and (out[1:] < 4).all()


def test_a_deadline_no_threshold_can_make_is_left_alone():
    load, allowed, caps = _rows(2)
    # Even both at 0.5 (2 x 512) miss 500 token-steps by their deadline: lowering them buys nothing.
    out = deadline_caps(FLAT, load, allowed, caps, _deadlines([1.0, 1.0], throughput=500.0), NO_ARRIVALS)
    np.testing.assert_array_equal(out, caps)
    # So is a request already past its deadline.
    out = deadline_caps(FLAT, load, allowed, caps, _deadlines([0.0, -1.0], throughput=1e9), NO_ARRIVALS)
    np.testing.assert_array_equal(out, caps)


@pytest.mark.parametrize("capacity_share", [0.3, 0.6, 0.9, 1.2])
def test_one_slo_for_all_is_the_horizon_check(capacity_share):
    """With every deadline the same, the per-deadline check is the horizon check of the
    requests in flight: the caps do not change."""
    load, allowed, caps = _rows(6)
    capacity = capacity_share * load[:, 4].sum()
    dl = _deadlines([10.0] * 6, throughput=capacity / 10.0)
    np.testing.assert_array_equal(
        price_caps(FLAT, load, allowed, caps, capacity, deadlines=dl), price_caps(FLAT, load, allowed, caps, capacity)
    )


def test_arrivals_due_by_a_deadline_count_by_how_long_before_it_they_can_come():
    dl = Deadlines(np.zeros(0), 1.0, np.array([1.0, 5.0]), window=10.0)
    # Over 3 s, an arrival with a 1 s SLO comes due if it arrives within 2 s: 2/10 of one;
    # one with a 5 s SLO cannot. Over 11 s: 10/10 and 6/10.
    np.testing.assert_allclose(dl.arrivals_due(np.array([100.0, 50.0]), np.array([3.0, 11.0])), [20.0, 130.0])


def test_arrivals_due_first_leave_less_room():
    load, allowed, caps = _rows(2)
    # 2 x 688 fit 1,400 in 1 s alone, not beside the 1 s-SLO arrivals expected within it.
    alone = deadline_caps(FLAT, load, allowed, caps, _deadlines([1.0, 1.0], throughput=1400.0), NO_ARRIVALS)
    np.testing.assert_array_equal(alone, caps)
    dl = Deadlines(np.array([1.0, 1.0]), 1400.0, np.array([0.5]), window=1.0)
    crowded = deadline_caps(FLAT, load, allowed, caps, dl, np.array([400.0]))
    assert (crowded < caps).all()


def test_controller_protects_the_interactive_tier():
    """Through the controller: an interactive tier (1 s SLO) beside a batch tier (100 s): the
    horizon is the batch tier's and holds everything; the interactive requests' deadline
    does not, and only they drop."""
    cfg = ControlConfig(thresholds=(0.5, 0.9), fixed_threshold=0.9, quality_budget=None)
    profile = LatencyProfile("flat", {1: StepCurve((1.0,), (1.0,))})  # 1 s steps: 1,200 token-steps/s
    caps = {}
    for load_control in ("capacity_price", "feasible_prefix"):
        ctl = ThresholdController(
            cfg, profile, TablePredictor([2, 10]), load_control=load_control, accuracy={0.5: 0.77, 0.9: 0.785}
        )
        # 100-token requests: 200 token-steps at 0.5, 1,000 at 0.9.
        reqs = [
            make_request("batch", slo=100.0, use_cache=False),
            make_request("chat-1", slo=1.0, use_cache=False, priority=1),
            make_request("chat-2", slo=1.0, use_cache=False, priority=1),
        ]
        for r in reqs:
            ctl.prepare_arrival(r, now=0.0)
        ctl.control_load(reqs, [(1, 1200)], now=0.0)
        caps[load_control] = {r.request_id: r.cap_index for r in reqs}
    assert caps["feasible_prefix"] == {"batch": 1, "chat-1": 1, "chat-2": 1}
    assert caps["capacity_price"] == {"batch": 1, "chat-1": 0, "chat-2": 0}
