"""The varying-threshold estimate: late-weighted step means, their fit, and old tables."""

import json
import logging

import numpy as np
import pytest

from dilaserve.predict.quality import (
    FORMAT,
    FixedRow,
    LateWeight,
    MixedRow,
    ThresholdQuality,
    late_weighted_mean,
    position_weights,
)

THRESHOLDS = (0.5, 0.7, 0.9)


def table(gamma=None) -> ThresholdQuality:
    fixed = [FixedRow(t, a, 10.0, 0.3, 50) for t, a in zip(THRESHOLDS, (0.2, 0.6, 0.9))]
    lw = None if gamma is None else LateWeight(gamma, 0.5, 0.5, 0.55, 100)
    return ThresholdQuality(fixed, MixedRow(THRESHOLDS, 0.4, 9.0, 0.7, 0.5, 50), {}, lw)


def test_position_weights_grow_with_gamma_and_are_flat_at_zero():
    assert position_weights(4, 0.0).tolist() == [1.0, 1.0, 1.0, 1.0]
    w = position_weights(4, 2.0)
    assert np.all(np.diff(w) > 0) and w[-1] == pytest.approx((3.5 / 4) ** 2)
    assert late_weighted_mean(np.array([0.2, 0.9]), 0.0) == pytest.approx(0.55)


def test_fixed_requests_get_their_fixed_accuracy_whatever_gamma():
    for g in (None, 0.0, 3.0):
        assert table(g).estimate([0.9] * 7) == pytest.approx(0.9)
        assert table(g).estimate([0.7]) == pytest.approx(0.6)


def test_slowing_down_late_costs_more_than_speeding_up_early():
    q = table(3.0)
    down, up = q.estimate([0.9] * 5 + [0.5] * 5), q.estimate([0.5] * 5 + [0.9] * 5)
    assert down < 0.55 < up  # 0.55: the plain step mean of both
    # One late dip from 0.9 costs a fraction of the accuracy gap, not a flat factor.
    assert 0.8 < q.estimate([0.9] * 10 + [0.7]) < 0.9


def test_fit_recovers_the_gamma_that_generated_the_outcomes():
    rng = np.random.default_rng(0)
    acc = [np.array([0.2, 0.9])[rng.integers(0, 2, size=rng.integers(4, 12))] for _ in range(4000)]
    acc = [a for a in acc if len(set(a)) > 1]
    truth = 3.0
    y = [rng.random() < late_weighted_mean(a, truth) for a in acc]
    fit = LateWeight.fit(acc, y)
    assert fit.gamma == pytest.approx(truth, abs=0.8)
    assert fit.n == len(acc) and fit.expected_accuracy == pytest.approx(fit.accuracy, abs=0.02)
    with pytest.raises(ValueError, match="no varying-threshold requests"):
        LateWeight.fit([], [])


def test_round_trip_and_format_one_tables(tmp_path, caplog):
    q = table(2.0)
    loaded = ThresholdQuality.load(q.save(tmp_path / "q.json"))
    assert loaded.to_dict() == q.to_dict() and loaded.late_weight.gamma == 2.0
    # A table saved before late_weight: loads, warns, and estimates with the mix factor.
    old = q.to_dict()
    del old["format"], old["late_weight"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    with caplog.at_level(logging.WARNING):
        legacy = ThresholdQuality.load(tmp_path / "old.json")
    assert "rebuild it" in caplog.text and legacy.late_weight is None
    assert legacy.estimate([0.5, 0.9]) == pytest.approx(0.55 * legacy.mix_factor)
    assert legacy.describe()["estimator"].startswith("step mean x mix factor")
    (tmp_path / "new.json").write_text(json.dumps({**q.to_dict(), "format": FORMAT + 1}))
    with pytest.raises(ValueError, match="newer than this code reads"):
        ThresholdQuality.load(tmp_path / "new.json")
