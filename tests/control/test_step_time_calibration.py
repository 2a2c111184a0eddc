"""Step-time calibration: the factor follows a machine that really is slower, weighs the
steps a queue waits for, and one stalled step does not move it."""

from __future__ import annotations

import pytest

from dilaserve.control.step_time import StepTimeCalibration, StepTimeConfig, weighted_median, weighted_quantile
from dilaserve.engine.state import StepKind
from tests.control.builders import linear_profile

REC = StepKind.RECOMPUTE


def _calibration(**cfg) -> StepTimeCalibration:
    return StepTimeCalibration(linear_profile({1: 1e-4}, base=0.002), StepTimeConfig(**cfg))


def _step(cal: StepTimeCalibration, tokens: float, slower: float, iid: str = "i0") -> None:
    expected = cal.expected(1, tokens, 0.0)
    cal.observe(iid, 1, expected, slower * sum(expected))


def test_weighted_median_goes_by_weight_not_count():
    assert weighted_median([(1.0, 1.0), (2.0, 1.0), (3.0, 1.0)]) == 2.0
    assert weighted_median([(1.0, 1.0), (2.0, 1.0), (3.0, 10.0)]) == 3.0
    assert weighted_median([(5.0, 0.1)]) == 5.0


@pytest.mark.parametrize("slower", [0.7, 3.0, 20.0])
def test_the_factor_follows_a_machine_that_really_is_slower(slower):
    cal = _calibration()
    for _ in range(16):
        _step(cal, 2000, slower)
    assert cal.factor(1, REC) == pytest.approx(slower, rel=1e-6)
    # and the control plane's profile is priced at it
    assert cal.profile.latency(1, 2000, REC) == pytest.approx(slower * cal.base.latency(1, 2000, REC))


def test_a_stalled_step_does_not_move_the_factor():
    cal = _calibration()
    for k in range(16):
        _step(cal, 2000, 50.0 if k == 11 else 2.0)
    assert cal.factor(1, REC) == pytest.approx(2.0)


def test_after_a_quiet_spell_of_small_steps_a_few_full_batches_set_the_factor():
    cal = _calibration()
    for _ in range(32):
        _step(cal, 40, 4.0)  # one request: a fixed cost makes it look 4x slower
    assert cal.factor(1, REC) == pytest.approx(4.0)
    _step(cal, 4000, 1.5)  # a full batch: 1.5x the profile
    # it carries more profiled time than the 31 small steps beside it, and is not left
    # waiting for seven more steps (seconds each on a loaded machine) to count
    assert cal.factor(1, REC) == pytest.approx(1.5)


def test_steps_of_the_usual_size_move_the_factor_once_most_of_the_window_has():
    cal = _calibration(window=32, min_steps=8)
    for _ in range(32):
        _step(cal, 2000, 2.0)
    assert cal.factor(1, REC) == pytest.approx(2.0)
    expected = cal.expected(1, 2000, 0.0)
    moved = [cal.observe("i0", 1, expected, 3.0 * sum(expected)) for _ in range(32)]
    # refitted every 8 steps, not every step: at 8 of 32 the window's median is still 2x, at
    # 16 it is midway, at 24 it is 3x
    assert [k for k, m in enumerate(moved) if m] == [15, 23]
    assert cal.factor(1, REC) == pytest.approx(3.0)


def test_an_absurd_clock_stays_within_the_bounds():
    cal = _calibration(bounds=(0.5, 8.0))
    for _ in range(8):
        _step(cal, 2000, 1000.0)
    assert cal.factor(1, REC) == 8.0


def test_weighted_quantile_at_a_half_is_the_median_and_goes_by_weight():
    pairs = [(1.0, 1.0), (2.0, 1.0), (3.0, 10.0), (0.5, 2.0)]
    assert weighted_quantile(pairs, 0.5) == weighted_median(pairs)
    assert weighted_quantile([(float(v), 1.0) for v in range(1, 11)], 0.9) == 9.5
    assert weighted_quantile([(1.0, 9.0), (100.0, 1.0)], 0.95) == 100.0
    assert weighted_quantile([(1.0, 9.0), (100.0, 1.0)], 0.5) == 1.0


def test_on_a_bimodal_machine_a_high_quantile_prices_the_slow_steps():
    # a step gets a core (2x the profile) or waits for one (100x), one in four waiting
    factors = {}
    for q in (0.5, 0.9):
        cal = _calibration(quantile=q)
        for k in range(32):
            _step(cal, 200, 150.0 if k % 4 == 0 else 2.0)
        factors[q] = cal.factor(1, REC)
    assert factors[0.5] == pytest.approx(2.0)
    assert factors[0.9] == pytest.approx(150.0)


def test_the_quantile_is_validated_with_a_fix():
    with pytest.raises(ValueError, match="weighted median"):
        StepTimeConfig(quantile=1.0)


def test_the_window_weight_kept_by_steps_is_the_window_sum():
    cal = _calibration(window=8, min_steps=8)
    for k in range(40):
        _step(cal, 100 + 37 * k, 3.0)
    window = cal._ratios[("i0", REC)]
    assert cal._weight[("i0", REC)] == pytest.approx(sum(w for _, w in window))
    cal.forget("i0")
    assert ("i0", REC) not in cal._weight


def test_the_mean_prices_a_bimodal_machine_at_what_a_queue_waits_for():
    # one step in four waits for a core (75x the profile), the others get one (2x): the
    # median says 2x, and a queue of these steps takes the mean, about 20x
    cal = _calibration(estimator="mean")
    for k in range(32):
        _step(cal, 200, 75.0 if k % 4 == 0 else 2.0)
    assert cal.factor(1, REC) == pytest.approx((75.0 + 3 * 2.0) / 4)


def test_the_mean_clips_a_lone_stall():
    cal = _calibration(estimator="mean")
    for k in range(32):
        _step(cal, 200, 500.0 if k == 20 else 3.0)
    assert cal.factor(1, REC) == pytest.approx(3.0)
    # without the clip the one stall would have moved it to about 18.5x
    unclipped = _calibration(estimator="mean", clip_quantile=1.0)
    for k in range(32):
        _step(unclipped, 200, 500.0 if k == 20 else 3.0)
    assert unclipped.factor(1, REC) > 15.0


def _timed_steps(cal: StepTimeCalibration, tokens: float, slower: float, start: float, n: int) -> float:
    expected = cal.expected(1, tokens, 0.0)
    for k in range(n):
        cal.observe("i0", 1, expected, slower * sum(expected), start + 0.1 * k)
    return start + 0.1 * n


def test_a_held_factor_comes_down_only_after_the_hold():
    cal = _calibration(hold_s=10.0)
    now = _timed_steps(cal, 200, 60.0, 0.0, 32)
    assert cal.factor(1, REC) == pytest.approx(60.0)
    # a quiet spell runs its steps fast: within the hold the factor stays where the load was
    now = _timed_steps(cal, 200, 2.0, now, 32)
    assert cal.factor(1, REC) == pytest.approx(60.0)
    # once the hold has passed with the machine fast, the factor follows it
    _timed_steps(cal, 200, 2.0, now + 10.0, 32)
    assert cal.factor(1, REC) == pytest.approx(2.0)
    # without a hold it had followed at once
    free = _calibration()
    now = _timed_steps(free, 200, 60.0, 0.0, 32)
    _timed_steps(free, 200, 2.0, now, 32)
    assert free.factor(1, REC) == pytest.approx(2.0)


def test_the_estimator_and_hold_are_validated_with_a_fix():
    with pytest.raises(ValueError, match="clipped mean"):
        StepTimeConfig(estimator="max")
    with pytest.raises(ValueError, match="no hold"):
        StepTimeConfig(hold_s=-1.0)
