"""The published step law: resampled steps meet the target tokens per step, replayed
rollouts keep the step table's contract, and the quality curve runs through the
published points."""

import numpy as np
import pytest

from dilaserve.control.step_law import StepLaw
from dilaserve.predict.dynamics import StepDynamics
from dilaserve.predict.published import (
    PUBLISHED_ACCURACY,
    calibrate,
    published_accuracy,
    published_quality,
    systematic_resample,
)
from dilaserve.predict.schema import validate_step_table
from dilaserve.sim.replay_rollouts import replay_rollouts
from tests.sim.builders import dynamics, quality


def _recorded() -> StepDynamics:
    # Spread-out steps at each threshold, so both fewer and more tokens per step are reachable.
    return dynamics({t: [1, 2, 3, 4, 6, 8, 10, 12, 16] for t in (0.5, 0.7, 0.9)}, n_buckets=2)


def test_calibration_meets_each_target_and_keeps_real_rows():
    rec = _recorded()
    targets = {0.5: 7.0, 0.9: 3.2}  # 0.7 has no target: kept as recorded
    cal, info = calibrate(rec, 32, oversample=50, seed=1, targets=targets)
    law = StepLaw.from_dynamics(cal, 32)
    for t, want in targets.items():
        assert law.tokens_per_step(t) == pytest.approx(want, rel=0.03)
    assert info.lam[0.9] > 0 > info.lam[0.5]  # fewer tokens per step at 0.9: small steps favoured
    assert law.steps(0.7) == pytest.approx(StepLaw.from_dynamics(rec, 32).steps(0.7))
    # Every resampled row is a recorded one (tokens and confidence statistics together).
    assert set(cal.samples["tokens_committed"].unique()) <= set(rec.samples["tokens_committed"].unique())
    with pytest.raises(ValueError, match="out of reach"):
        calibrate(rec, 32, targets={0.5: 31.0})


def test_replayed_rollouts_pass_the_step_table_contract_and_follow_the_law():
    rec = _recorded()
    steps, requests = replay_rollouts(rec, [32, 64, 96], [0.5, 0.9], repeats=20, seed=3)
    validate_step_table(steps)
    assert requests.height == 3 * 20 * 2 and steps["request_id"].n_unique() == 60
    law = StepLaw.from_dynamics(rec, 32)
    for t in (0.5, 0.9):
        got = requests.filter(requests["threshold"] == t)
        assert got["output_length"].sum() / got["steps"].sum() == pytest.approx(law.tokens_per_step(t), rel=0.1)
    again, _ = replay_rollouts(rec, [32, 64, 96], [0.5, 0.9], repeats=20, seed=3)
    assert again.equals(steps)  # seeded


def test_quality_curve_runs_through_the_published_points():
    for t, acc in PUBLISHED_ACCURACY.items():
        assert published_accuracy(t) == pytest.approx(acc)
    assert published_accuracy(0.8) == pytest.approx(0.7775)
    assert published_accuracy(0.5) < published_accuracy(0.6) < published_accuracy(0.7)  # extrapolated slope
    table = published_quality({0.5: 5.0, 0.9: 10.0}, {0.5: 0.15, 0.9: 0.3}, quality())
    assert [r.accuracy for r in table.fixed] == pytest.approx([published_accuracy(0.5), 0.785])
    assert "not a measurement" in table.meta["label"]
    assert np.isclose(table.estimate([0.9] * 4), 0.785)


def test_systematic_resampling_draws_every_index_within_one_of_its_expected_count():
    rng = np.random.default_rng(0)
    weights = rng.exponential(size=37) ** 3  # a few heavy weights, as a strong tilt gives
    n = 37 * 8
    counts = np.bincount(systematic_resample(weights, n, rng), minlength=37)
    assert counts.sum() == n
    assert np.all(np.abs(counts - n * weights / weights.sum()) < 1 + 1e-9)
