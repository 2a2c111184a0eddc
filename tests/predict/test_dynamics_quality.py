import numpy as np
import polars as pl
import pytest

from dilaserve.engine import DenoisingEngine
from dilaserve.predict.dynamics import StepDynamics, bucket_of
from dilaserve.predict.prompts import synthetic_prompts
from dilaserve.predict.quality import ThresholdQuality
from dilaserve.predict.rollouts import mixed_threshold_jobs, run_rollouts, switched_threshold_jobs


def test_bucket_of_edges():
    assert bucket_of([0.0, 0.24, 0.25, 0.99, 1.0], 4).tolist() == [0, 0, 1, 3, 3]


def test_dynamics_replays_recorded_steps(step_table, tmp_path):
    dyn = StepDynamics.from_step_table(step_table, n_buckets=4)
    assert dyn.samples.height == step_table.height
    rng = np.random.default_rng(0)
    recorded = step_table.filter((pl.col("threshold") == 0.9) & (pl.col("block_unmasked_ratio") < 0.25))
    for _ in range(20):
        tokens, conf = dyn.sample(0.88, 0.1, rng)  # nearest recorded threshold is 0.9
        assert tokens in set(recorded["tokens_committed"]) and conf.shape == (5,)
    tc = dyn.mean_tokens_per_step()
    assert tc[0.5] > tc[0.9] >= 1
    loaded = StepDynamics.load(dyn.save(tmp_path))
    assert loaded.n_buckets == 4 and loaded.mean_tokens_per_step() == pytest.approx(tc)


def test_threshold_quality_from_fixed_and_mixed_rollouts(rollout, tmp_path):
    engine = DenoisingEngine.from_pretrained()
    mixed = run_rollouts(engine, mixed_threshold_jobs(synthetic_prompts(24, seed=5), [0.5, 0.9]), seed=1)
    used = mixed.steps["step_threshold"].unique().to_list()
    assert set(used) == {0.5, 0.9}, "a random mix uses both thresholds"
    switched = run_rollouts(engine, switched_threshold_jobs(synthetic_prompts(24, seed=5), [0.5, 0.9]), seed=2)
    table = ThresholdQuality.from_rollouts(
        rollout.requests, mixed.requests, mixed.steps, varied=[(switched.requests, switched.steps)]
    )
    assert [r.threshold for r in table.fixed] == [0.5, 0.9]
    assert table.fixed[0].mean_steps < table.fixed[1].mean_steps
    lo, hi = table.fixed[0].mean_steps, table.fixed[1].mean_steps
    assert lo <= table.mixed.mean_steps <= hi
    assert 0.5 < table.mixed.mean_threshold < 0.9
    assert 0 <= table.estimate([0.5, 0.9, 0.9]) <= 1
    assert table.estimate([0.9]) == pytest.approx(table.fixed[1].accuracy)
    # The late weighting is fitted on every request whose threshold changed, in both decodes.
    lw = table.late_weight
    assert 0 < lw.n <= 48 and 0.0 <= lw.gamma <= 10.0 and 0 <= lw.expected_accuracy <= 1
    loaded = ThresholdQuality.load(table.save(tmp_path / "q.json"))
    assert loaded.to_dict() == table.to_dict()
