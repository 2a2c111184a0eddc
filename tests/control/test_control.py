import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from dilaserve.control import (
    CapacityModel,
    ControlConfig,
    PredictionCache,
    RequestShape,
    ThresholdController,
    cap_thresholds,
    remaining_time,
    request_load,
    split_cost,
    walk_thresholds,
)
from dilaserve.control.cost_model import split_cost_one
from dilaserve.control.predictions import StepCalibration
from dilaserve.control.step_law import StepLaw
from dilaserve.predict.base import OneShotPredictor
from dilaserve.profile.types import LatencyProfile, StepCurve
from tests.control.builders import TablePredictor, commit, flat_profile, make_request


# ------------------------------------------------------------------ threshold walk
def test_threshold_walk_hand_case():
    allowed = np.ones((4, 3), dtype=bool)
    allowed[3, 0] = False
    remaining = np.tile([1.0, 2.0, 4.0], (4, 1))  # seconds at 0.5 / 0.7 / 0.9
    slo_left = np.array([5.0, 2.5, 0.5, 0.5])
    # 4 <= 5 -> 0.9; 2 <= 2.5 -> 0.7; nothing fits -> lowest allowed (0.5, then 0.7 for row 3)
    np.testing.assert_array_equal(walk_thresholds(allowed, remaining, slo_left), [2, 1, 0, 1])


@settings(max_examples=200, deadline=None)
@given(hst.data())
def test_threshold_walk_matches_its_array_form(data):
    # The walk as array operations: highest fitting allowed index, else the lowest allowed.
    m, t = data.draw(hst.integers(1, 6)), data.draw(hst.integers(1, 5))
    allowed = np.array(data.draw(hst.lists(hst.lists(hst.booleans(), min_size=t, max_size=t), min_size=m, max_size=m)))
    remaining = np.array(
        data.draw(hst.lists(hst.lists(hst.floats(0, 10), min_size=t, max_size=t), min_size=m, max_size=m))
    )
    slo_left = np.array(data.draw(hst.lists(hst.floats(-1, 10), min_size=m, max_size=m)))
    fits = allowed & (remaining <= slo_left[:, None])
    expect = np.where(fits.any(axis=1), t - 1 - np.argmax(fits[:, ::-1], axis=1), np.argmax(allowed, axis=1))
    np.testing.assert_array_equal(walk_thresholds(allowed, remaining, slo_left), expect)


@settings(max_examples=200, deadline=None)
@given(
    hst.lists(hst.floats(1, 500), min_size=1, max_size=5),
    hst.integers(0, 8),
    hst.booleans(),
    hst.floats(1e-4, 1),
    hst.floats(1e-4, 1),
)
def test_split_cost_one_equals_array_form_exactly(steps, rl, use_cache, cu, ru):
    # Threshold selection uses the scalar form; load control the array form: same numbers.
    one = [split_cost_one(x, rl, use_cache, cu, ru) for x in steps]
    arr = split_cost(np.array([steps]), np.array([float(rl) if use_cache else 0.0]), np.array([use_cache]), cu, ru)
    assert one == arr[0].tolist()


def test_select_uses_cache_aware_remaining_time():
    # gen 64 / block 32 => 2 recompute steps certain; 10 steps => 8 cache + 2 recompute
    # = 8 * 0.01 + 2 * 0.1 = 0.28 s at every threshold of this table.
    cfg = ControlConfig(thresholds=(0.5, 0.9), fixed_threshold=0.9)
    ctl = ThresholdController(
        cfg, flat_profile(), TablePredictor([10, 10]), selection="paper", load_control="none", step_pricing="paper"
    )
    tight, loose = make_request("a", slo=0.27), make_request("b", slo=0.29)
    for r in (tight, loose):
        ctl.prepare_arrival(r, now=0.0)
    shape = RequestShape.of([tight])
    t = remaining_time(np.array([[10.0, 10.0]]), shape, ctl.profile, 1, 1000, 2)
    np.testing.assert_allclose(t, [[0.28, 0.28]])
    ctl.select([tight, loose], tp=1, inst_tokens=200, inst_requests=2, now=0.0)
    assert (tight.threshold_index, loose.threshold_index) == (0, 1)
    # Without caching every step costs a recompute step: 10 * 0.1 = 1.0 s.
    nc = make_request("c", use_cache=False)
    t = remaining_time(np.array([[10.0, 10.0]]), RequestShape.of([nc]), ctl.profile, 1, 1000, 2)
    np.testing.assert_allclose(t, [[1.0, 1.0]])


# ------------------------------------------------------------------- request load
def test_request_load_with_and_without_cache():
    cached, plain = make_request("a", prompt=100, gen=64), make_request("b", prompt=100, gen=64, use_cache=False)
    steps = np.array([[10.0], [10.0]])
    load = request_load(steps, RequestShape.of([cached, plain]))
    # cache: (10 - 2) * 32 + 2 * 164 = 584; plain: 10 * 164 = 1640
    np.testing.assert_allclose(load[:, 0], [584, 1640])
    commit(cached, 32)  # first block done: one recompute step left
    load = request_load(np.array([[1.0]]), RequestShape.of([cached]))
    assert load[0, 0] == 164  # a prediction below the recompute floor is raised to it


def test_instance_capacity_hand_case():
    p = LatencyProfile("p", {1: StepCurve((100.0, 1000.0), (1.0, 2.0))})
    # b / LP(b): 100 / 1 = 100 at the first point, 1000 / 2 = 500 at the batch limit
    assert CapacityModel(p).throughput(1, 1000) == pytest.approx(500)
    assert CapacityModel(p).throughput(1, 550) == pytest.approx(550 / 1.5)
    # cache pattern, B = 2, one request of 100 tokens: work 1*2 + 100, time LP(2) + LP(100) = 2
    split = StepLaw.one_token_per_step(2).split(0.9, prompt_tokens=98, gen_tokens=2)
    assert CapacityModel(p).throughput(1, 100, split) == pytest.approx(102 / 2.0)


# ------------------------------------------------------------------ load control
def test_load_capping_with_suffix_sums_hand_case():
    load = np.tile([1.0, 2.0, 4.0], (3, 1))
    allowed = np.ones((3, 3), dtype=bool)
    # i=0: 0 + 4 + (1 + 1) <= 7 -> keep 0.9, used 4
    # i=1: 4 + 2 + 1 <= 7 -> 0.7 (4 would not fit), used 6;  i=2: 6 + 1 <= 7 -> lowest
    np.testing.assert_array_equal(cap_thresholds(load, allowed, 7.0), [2, 1, 0])
    np.testing.assert_array_equal(cap_thresholds(load, allowed, 100.0), [2, 2, 2])
    np.testing.assert_array_equal(cap_thresholds(load, allowed, 0.0), [0, 0, 0])


@settings(max_examples=60, deadline=None)
@given(hst.data())
def test_after_load_control_worst_case_fits_unless_all_lowest(data):
    n = data.draw(hst.integers(1, 12))
    t = data.draw(hst.integers(1, 5))
    load = np.array(
        data.draw(hst.lists(hst.lists(hst.floats(0.1, 100), min_size=t, max_size=t), min_size=n, max_size=n))
    )
    allowed = np.array(data.draw(hst.lists(hst.lists(hst.booleans(), min_size=t, max_size=t), min_size=n, max_size=n)))
    allowed[np.arange(n), data.draw(hst.lists(hst.integers(0, t - 1), min_size=n, max_size=n))] = True
    capacity = data.draw(hst.floats(0, 600))
    caps = cap_thresholds(load, allowed, capacity)
    lowest = np.argmax(allowed, axis=1)
    assert allowed[np.arange(n), caps].all() and (caps >= lowest).all()
    if (caps == lowest).all():
        return
    assert load[np.arange(n), caps].sum() <= capacity + 1e-9


def test_high_priority_requests_are_capped_last():
    cfg = ControlConfig(thresholds=(0.5, 0.9), fixed_threshold=0.9)
    # Flat 1 s steps, no caching: an instance does max_batch token-steps per second.
    profile = LatencyProfile("flat", {1: StepCurve((1.0,), (1.0,))})
    ctl = ThresholdController(cfg, profile, TablePredictor([2, 10]), load_control="paper")
    early = make_request("early", prompt=36, gen=64, arrival=0.0, slo=10.0, use_cache=False)
    vip = make_request("vip", prompt=36, gen=64, arrival=1.0, slo=10.0, priority=1, use_cache=False)
    for r in (early, vip):
        ctl.prepare_arrival(r, now=1.0)
    # Loads: 2 * 100 = 200 at 0.5, 10 * 100 = 1000 at 0.9. Capacity 120 tok/s x 10 s = 1200
    # fits one request at 0.9 and one at 0.5: the later, high-priority one keeps 0.9.
    ctl.control_load([early, vip], [(1, 120)], now=1.0)
    assert (vip.cap_index, early.cap_index) == (1, 0)
    ctl.control_load([early, vip], [(1, 200)], now=1.0)
    assert (vip.cap_index, early.cap_index) == (1, 1)


def test_slo_missed_on_arrival_is_served_at_lowest_by_the_paper(caplog):
    ctl = ThresholdController(ControlConfig(), flat_profile(), TablePredictor([1] * 5), selection="paper")
    r = make_request("late", arrival=0.0, slo=1.0, min_threshold=0.7)
    with caplog.at_level(logging.WARNING):
        ctl.prepare_arrival(r, now=5.0)
    assert r.late_on_arrival and "past its deadline" in caplog.text
    assert r.allowed.tolist() == [False, False, True, False, False] and r.cap_index == 2


def test_slo_missed_on_arrival_keeps_its_quality_when_quality_aware():
    ctl = ThresholdController(ControlConfig(quality_budget=None), flat_profile(), TablePredictor([1] * 5))
    r = make_request("late", arrival=0.0, slo=1.0, min_threshold=0.7)
    ctl.prepare_arrival(r, now=5.0)
    assert r.late_on_arrival and r.allowed.tolist() == [False, False, True, True, True]
    ctl.select([r], 1, 100, 1, now=5.0)
    assert ctl.threshold(r) == 0.9  # nothing makes its SLO: no reason to lower it


def test_fixed_threshold_mode_needs_no_predictor():
    ctl = ThresholdController(ControlConfig(), flat_profile(), None, selection="fixed")
    r = make_request("a")
    ctl.prepare_arrival(r, 0.0)
    ctl.select([r], 1, 100, 1, 0.0)
    assert ctl.threshold(r) == 0.9
    with pytest.raises(ValueError, match="needs a StepPredictor"):
        ThresholdController(ControlConfig(), flat_profile(), None)


def test_predictions_refresh_every_k_steps_and_scale_between():
    cache = PredictionCache(OneShotPredictor({0.9: 0.5}), (0.9,), every_k=2)
    r = make_request("a", gen=64)
    cache.refresh([r])
    assert r.steps_pred[0] == 32 and cache.calls == 1
    commit(r, 16)  # one step, half a block: not due yet; estimate scales by masked left
    assert not cache.due(r)
    assert PredictionCache.steps_left([r])[0, 0] == pytest.approx(32 * 48 / 64)
    assert PredictionCache.steps_left_at(r, 0) == PredictionCache.steps_left([r])[0, 0]
    commit(r, 1)
    assert cache.refresh_due([r]) == 1 and cache.calls == 2


def _finished(cache: PredictionCache, rid: str, gen: int, steps: int):
    """A request of ``gen`` tokens predicted on arrival, then finished in ``steps`` steps at 0.9."""
    r = make_request(rid, gen=gen)
    cache.refresh([r])
    r.state.steps_done, r.state.thresholds_used = steps, [0.9]
    return r


def test_calibration_learns_a_factor_per_answer_length():
    # The one-shot rate predicts half a step per token: 16 steps for one block, 128 for
    # eight. Short answers take half that, long ones twice: one factor for all would
    # overstate the short and understate the long.
    cache = PredictionCache(OneShotPredictor({0.9: 0.5}), (0.9,), every_k=2, calibrate=True)
    for i in range(300):
        cache.observe_finish(_finished(cache, f"s{i}", 32, 8))
        cache.observe_finish(_finished(cache, f"l{i}", 256, 256))
    short, long_, medium = make_request("s", gen=32), make_request("l", gen=256), make_request("m", gen=96)
    assert cache.scale_for(short) == pytest.approx(0.5, rel=0.05)
    assert cache.scale_for(long_) == pytest.approx(2.0, rel=0.05)
    # A length class no request has finished in yet takes the factor over all requests.
    assert cache.scale_for(medium) == pytest.approx(cache.scale) and 0.5 < cache.scale < 2.0
    cache.refresh([short, long_])
    assert short.steps_pred[0] == pytest.approx(8, rel=0.05) and long_.steps_pred[0] == pytest.approx(256, rel=0.05)


def test_a_length_class_keeps_the_overall_factor_until_enough_finish():
    cache = PredictionCache(OneShotPredictor({0.9: 0.5}), (0.9,), every_k=2, calibrate=True)
    for i in range(200):
        cache.observe_finish(_finished(cache, f"s{i}", 32, 32))  # short answers: twice the prediction
    for i in range(PredictionCache.CALIBRATION_MIN_CLASS - 1):
        cache.observe_finish(_finished(cache, f"l{i}", 256, 32))  # long ones: a quarter of it
    assert cache.scale_for(make_request("l", gen=256)) == pytest.approx(cache.scale)
    cache.observe_finish(_finished(cache, "last", 256, 32))
    assert cache.scale_for(make_request("l", gen=256)) < cache.scale


def test_a_cache_resumed_from_anothers_calibration_predicts_as_it_does():
    """A tuner's replay starts from the live calibration: a fresh cache resumed from a
    learned one scales every length class as that one does, and goes on learning; a cache
    without calibration ignores it."""
    live = PredictionCache(OneShotPredictor({0.9: 0.5}), (0.9,), every_k=2, calibrate=True)
    for i in range(100):
        live.observe_finish(_finished(live, f"s{i}", 32, 8))
        live.observe_finish(_finished(live, f"l{i}", 256, 256))
    learned = live.learned()
    assert [k for k, _, _ in learned.classes] == sorted(k for k, _, _ in learned.classes)
    replay = PredictionCache(OneShotPredictor({0.9: 0.5}), (0.9,), every_k=2, calibrate=True)
    assert replay.learned() == StepCalibration()  # nothing learned yet
    replay.resume(learned)
    for gen in (32, 96, 256):
        assert replay.scale_for(make_request("r", gen=gen)) == live.scale_for(make_request("r", gen=gen))
    assert replay.learned() == learned
    replay.observe_finish(_finished(replay, "next", 32, 32))
    assert replay.scale_for(make_request("r", gen=32)) > live.scale_for(make_request("r", gen=32))
    off = PredictionCache(OneShotPredictor({0.9: 0.5}), (0.9,), every_k=2)
    off.resume(learned)
    assert off.scale_for(make_request("r", gen=256)) == 1.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(thresholds=()), "at least one threshold"),
        (dict(fixed_threshold=0.95), "not a candidate"),
        (dict(refresh_every_steps=0), "use 1"),
    ],
)
def test_config_errors_say_how_to_fix(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ControlConfig(**kwargs)
