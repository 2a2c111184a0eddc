"""The price of capacity: quality is free at light load, per-work optimal under overload."""

import logging

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as hst

from dilaserve.control import ControlConfig, ThresholdController
from dilaserve.control.capacity_price import Deadlines, per_work_optimum, price_caps
from dilaserve.control.policies import Outlook, load_controls
from dilaserve.profile.types import LatencyProfile, StepCurve
from tests.control.builders import TablePredictor, make_request

#: Accuracy at 0.5 .. 0.9: a flat curve (LLaDA-like) and a steep one (the embedded model's).
FLAT = np.array([0.755, 0.7625, 0.77, 0.7775, 0.785])
STEEP = np.array([0.15, 0.58, 0.72, 0.84, 0.92])
#: Work of a one-block request at 0.5 .. 0.9 (token-steps): its recompute step over 400
#: tokens plus its cache steps over a 32-token block, under each curve's own step law.
WORK = 400.0 + 32.0 * np.array([3.5, 4.2, 5.3, 6.6, 9.0])
WORK_STEEP = 400.0 + 32.0 * np.array([3.4, 4.0, 4.8, 6.0, 6.2])


def _rows(n, work=WORK):
    return np.tile(work, (n, 1)), np.ones((n, 5), dtype=bool), np.full(n, 4)


def test_per_work_optimum_follows_the_quality_curve():
    load, allowed, _ = _rows(1)
    assert per_work_optimum(FLAT, load, allowed)[0] == 0  # flat: 0.5 buys most accuracy per work
    assert per_work_optimum(STEEP, _rows(1, WORK_STEEP)[0], allowed)[0] == 4  # steep: 0.9 does
    # Only allowed thresholds count (a quality budget of 0.8 and 0.9).
    assert per_work_optimum(FLAT, load, np.array([[False, False, False, True, True]]))[0] == 3


def test_light_load_keeps_the_highest_allowed_threshold():
    for acc, work in ((FLAT, WORK), (STEEP, WORK_STEEP)):
        load, allowed, caps = _rows(10, work)
        out = price_caps(acc, load, allowed, caps, capacity=load[:, 4].sum())
        np.testing.assert_array_equal(out, caps)


def test_overload_on_a_flat_curve_holds_the_per_work_optimum():
    load, allowed, caps = _rows(10)
    # Not even every request at 0.5 fits: no lower cap than the optimum, which is 0.5 here.
    np.testing.assert_array_equal(price_caps(FLAT, load, allowed, caps, capacity=load[:, 0].sum() / 2), [0] * 10)
    # A cap some other load control set below the optimum stays.
    assert price_caps(FLAT, load, np.ones((1, 5), bool), np.array([1]), capacity=0.0)[0] == 0
    floor_above = np.array([[False, False, True, True, True]])
    assert price_caps(FLAT, load[:1], floor_above, np.array([4]), capacity=0.0)[0] == 2  # the client's floor


def test_a_steep_curve_never_drops_below_its_per_work_optimum():
    load, allowed, caps = _rows(10, WORK_STEEP)
    for capacity in (0.0, load[:, 0].sum(), load[:, 2].sum()):
        for clearing in (False, True):
            np.testing.assert_array_equal(price_caps(STEEP, load, allowed, caps, capacity, clearing=clearing), caps)


def test_per_work_price_puts_every_request_at_its_optimum_once_loaded():
    load, allowed, caps = _rows(10)
    capacity = load[:, 3].sum()  # all would fit at 0.8, not at 0.9: the cluster is capacity-bound
    out = price_caps(FLAT, load, allowed, caps, capacity, clearing=False, spread=0.0)
    np.testing.assert_array_equal(out, [0] * 10)
    # Per request: a long-prompt request's recompute work dwarfs its cache steps, so its
    # per-work optimum is higher than a short one's.
    long_prompt = 6000.0 + 32.0 * np.array([3.5, 4.2, 5.3, 6.6, 9.0])
    both = np.array([WORK, long_prompt])
    assert price_caps(FLAT, both, np.ones((2, 5), bool), np.array([4, 4]), capacity=0.0).tolist() == [0, 3]


def test_heavy_tailed_arrivals_keep_more_headroom():
    load, allowed, caps = _rows(10)
    load[9] *= 200  # one long request in flight: its drops free the most work
    one, many = _rows(1)[0], _rows(400)[0]
    capacity = 1.1 * (load[:, 4].sum() + many[:, 4].sum())  # 10% over the mean demand at 0.9
    steady = price_caps(FLAT, load, allowed, caps, capacity, many, np.ones_like(many, dtype=bool))
    spread = np.concatenate([many[:396], 100 * one, 100 * one, 100 * one, 100 * one])
    spread *= many[:, 4].sum() / spread[:, 4].sum()  # the same mean work, heavy-tailed
    bursty = price_caps(FLAT, load, allowed, caps, capacity, spread, np.ones_like(spread, dtype=bool))
    assert (steady == 4).all() and bursty[9] < 4
    # With the mean alone (no spread) both fit.
    assert (
        price_caps(FLAT, load, allowed, caps, capacity, spread, np.ones_like(spread, dtype=bool), spread=0.0) == 4
    ).all()


def test_the_clearing_price_drops_just_far_enough_and_cheapest_first():
    load, allowed, caps = _rows(10)
    capacity = load[:, 3].sum()
    out = price_caps(FLAT, load, allowed, caps, capacity)
    assert load[np.arange(10), out].sum() <= capacity
    assert (out == 3).all()  # one step down, not to 0.5
    # Two shapes: the drop that frees more work for the same accuracy goes first.
    heavy = 400.0 + 64.0 * np.array([3.5, 4.2, 5.3, 6.6, 9.0])
    load2 = np.array([WORK, heavy])
    out = price_caps(FLAT, load2, np.ones((2, 5), bool), np.array([4, 4]), WORK[4] + heavy[3])
    assert out.tolist() == [4, 3]
    # Past what even the optimum fits, it is the per-work optimum too.
    out = price_caps(FLAT, load, allowed, caps, load[:, 0].sum() / 2)
    np.testing.assert_array_equal(out, [0] * 10)


@settings(max_examples=60, deadline=None)
@given(hst.data(), hst.booleans())
def test_caps_stay_between_the_per_work_optimum_and_the_given_cap(data, clearing):
    n, t = data.draw(hst.integers(1, 6)), 5
    load = np.sort(np.array(data.draw(hst.lists(hst.floats(1, 100), min_size=n * t, max_size=n * t))).reshape(n, t))
    allowed = np.array(data.draw(hst.lists(hst.booleans(), min_size=n * t, max_size=n * t))).reshape(n, t)
    allowed[:, 4] = True
    acc = np.sort(np.array(data.draw(hst.lists(hst.floats(0.05, 1.0), min_size=t, max_size=t))))
    caps = np.full(n, 4)
    capacity = data.draw(hst.floats(0, 600))
    out = price_caps(acc, load, allowed, caps, capacity, clearing=clearing)
    floor = per_work_optimum(acc, load, allowed)
    assert allowed[np.arange(n), out].all()
    assert ((out >= floor) & (out <= caps)).all()
    if (out > floor).any():  # someone above its optimum: then the load fits
        assert load[np.arange(n), out].sum() <= capacity + 1e-9


def _controller(accuracy):
    cfg = ControlConfig(thresholds=(0.5, 0.9), fixed_threshold=0.9, quality_budget=None)
    # Flat 1 s steps, no caching: an instance does max_batch token-steps per second.
    profile = LatencyProfile("flat", {1: StepCurve((1.0,), (1.0,))})
    return ThresholdController(cfg, profile, TablePredictor([2, 10]), accuracy=accuracy)


def test_controller_prices_capacity_for_the_requests_arriving_next():
    # 100-token requests: load 200 at 0.5 and 1000 at 0.9; capacity 1,200 x 10 s = 12,000.
    flat, steep = {0.5: 0.77, 0.9: 0.785}, {0.5: 0.15, 0.9: 0.92}
    for accuracy, expect in ((flat, 0), (steep, 1)):
        ctl = _controller(accuracy)
        reqs = []
        for i in range(8):
            r = make_request(f"r{i}", prompt=36, gen=64, arrival=0.1 * i, slo=10.0, use_cache=False)
            ctl.prepare_arrival(r, now=0.1 * i)
            reqs.append(r)
            ctl.control_load(reqs, [(1, 1200)], now=0.1 * i)
            if i == 1:  # two in flight, two arrivals: 4,000 fits, quality is free
                assert [q.cap_index for q in reqs] == [1, 1]
        # Eight in flight (8,000) fit the walk of the paper, but not with the eight that
        # arrived over the last horizon expected again (16,000): on a flat curve they drop.
        assert [q.cap_index for q in reqs] == [expect] * 8
    # The paper's walk sees only the requests in flight.
    ctl = ThresholdController(
        ControlConfig(thresholds=(0.5, 0.9), fixed_threshold=0.9, quality_budget=None),
        LatencyProfile("flat", {1: StepCurve((1.0,), (1.0,))}),
        TablePredictor([2, 10]),
        load_control="feasible_prefix",
        accuracy=flat,
    )
    for r in reqs:
        r.in_outlook = False
    ctl.control_load(reqs, [(1, 1200)], now=0.8)
    assert [q.cap_index for q in reqs] == [1] * 8


def test_capacity_price_without_a_quality_table_is_the_feasible_prefix_walk(caplog):
    with caplog.at_level(logging.WARNING):
        ctl = _controller(None)
    assert "no threshold-quality table" in caplog.text
    reqs = [make_request(f"r{i}", prompt=36, gen=64, slo=10.0, use_cache=False) for i in range(8)]
    for r in reqs:
        ctl.prepare_arrival(r, now=0.0)
    ctl.control_load(reqs, [(1, 1200)], now=0.0)
    assert [q.cap_index for q in reqs] == [1] * 8
    piece = load_controls.get("capacity_price")(ControlConfig())
    outlook = Outlook(FLAT, np.zeros((0, 5)), np.zeros((0, 5), dtype=bool))
    load, allowed, _ = _rows(3)
    np.testing.assert_array_equal(
        piece.caps(load, allowed, 1e9, outlook),
        load_controls.get("feasible_prefix")(ControlConfig()).caps(load, allowed, 1e9),
    )


@settings(max_examples=60, deadline=None)
@given(
    pins=hst.lists(hst.integers(0, 4), min_size=1, max_size=12),
    arriving=hst.lists(hst.integers(0, 4), max_size=6),
    capacity=hst.floats(0.0, 8000.0),
)
def test_every_load_control_leaves_a_pinned_request_its_one_threshold(pins, arriving, capacity):
    """A request pinned to one threshold (a static operating point) is capped at it by every
    load control, at any load: the load pass skips the walk where all are pinned."""
    eye = np.eye(5, dtype=bool)
    allowed, load = eye[pins], np.tile(WORK, (len(pins), 1))
    deadlines = Deadlines(np.linspace(0.5, 5.0, len(pins)), capacity / 5.0, np.full(len(arriving), 2.0), 5.0)
    outlook = Outlook(STEEP, np.tile(WORK, (len(arriving), 1)), eye[arriving].reshape(-1, 5), deadlines)
    for name in load_controls.names():
        piece = load_controls.get(name)(ControlConfig())
        caps = piece.caps(load, allowed, capacity, outlook if piece.needs_outlook else None)
        assert caps.tolist() == pins, name
