import pickle

import numpy as np
import polars as pl
import pytest

from dilaserve.predict.base import PredictionBatch
from dilaserve.predict.booster_call import BoosterCall
from dilaserve.predict.evaluate import evaluate
from dilaserve.predict.features import FEATURE_NAMES
from dilaserve.predict.lgbm import (
    LightGBMPredictor,
    TuningConfig,
    features_of,
    oneshot_rates,
    split_by_request,
    train_predictor,
)

FAST = TuningConfig(n_trials=3, timeout_s=20, max_trees=25)


@pytest.fixture(scope="module")
def trained(step_table):
    return train_predictor(step_table, FAST)


def test_split_is_by_request(step_table):
    rest, held = split_by_request(step_table, 0.25, seed=1)
    assert set(rest["request_id"]).isdisjoint(set(held["request_id"]))
    assert rest.height + held.height == step_table.height
    assert held["request_id"].n_unique() == 6


def test_training_is_reproducible_from_the_seed(step_table, trained):
    again = train_predictor(step_table, FAST)
    assert again.test_requests == trained.test_requests
    x = features_of(step_table)
    np.testing.assert_array_equal(again.predictor.booster.predict(x), trained.predictor.booster.predict(x))


def test_predictor_beats_oneshot_on_held_out_requests(step_table, trained):
    test = step_table.filter(pl.col("request_id").is_in(trained.test_requests))
    ev = evaluate({"lightgbm": trained.predictor, "oneshot": trained.oneshot}, test)
    assert ev.metric("lightgbm", "rel_err") < ev.metric("oneshot", "rel_err")
    assert ev.metric("lightgbm", "mae") < ev.metric("oneshot", "mae")
    assert set(ev.by_threshold["threshold"]) == {0.5, 0.9}
    assert ev.by_decile["decile"].is_between(0, 9).all()


def test_save_load_round_trip_and_batched_predict(tmp_path, trained, step_table):
    trained.predictor.save(tmp_path)
    loaded = LightGBMPredictor.load(tmp_path)
    progress = step_table.select("output_length", *FEATURE_NAMES[2:]).to_numpy()[:7]
    batch = PredictionBatch.build([f"r{i}" for i in range(7)], progress, [0.5, 0.7, 0.9])
    got = loaded.predict(batch)
    assert got.shape == (7, 3) and (got >= 1).all()
    np.testing.assert_allclose(got, trained.predictor.predict(batch))
    assert loaded.meta["features"] == list(FEATURE_NAMES)
    assert loaded.meta["oneshot_steps_per_token"]


def test_direct_booster_call_predicts_as_booster_predict(trained, step_table):
    booster = trained.predictor.booster
    call = BoosterCall(booster)
    x = features_of(step_table)
    # Row by row (few rows) and batched (many rows): the numbers of Booster.predict.
    for rows in (x[:1], x[: BoosterCall.ROW_BY_ROW_MAX], x[: BoosterCall.ROW_BY_ROW_MAX + 1], x[::3]):
        np.testing.assert_array_equal(call(rows), booster.predict(rows, num_threads=1))
    np.testing.assert_array_equal(call(x[:7:2]), booster.predict(np.ascontiguousarray(x[:7:2])))  # strided
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(call))(x[:3]), booster.predict(x[:3]))
    with pytest.raises(Exception, match="(?i)feature|column"):
        call(x[:, :5])


def test_load_rejects_a_different_feature_list(tmp_path, trained):
    trained.predictor.save(tmp_path)
    meta = (tmp_path / "meta.json").read_text().replace('"conf_q75"', '"conf_max"')
    (tmp_path / "meta.json").write_text(meta)
    with pytest.raises(ValueError, match="retrain"):
        LightGBMPredictor.load(tmp_path)


def test_oneshot_rates_are_steps_per_token(step_table):
    rates = oneshot_rates(step_table)
    assert set(rates) == {0.5, 0.9} and rates[0.5] < rates[0.9] <= 1


@pytest.mark.parametrize("bad", [dict(n_trials=0), dict(test_fraction=1.0), dict(max_leaves=1)])
def test_tuning_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        TuningConfig(**bad)


def test_predictions_scale_with_masked_tokens_beyond_the_rollout_lengths(trained, step_table):
    # A request 4x longer than any rollout, at the same progress, is predicted to need
    # several times the steps (the booster predicts per masked token; its per-token rate
    # may still follow the longest rollouts); a step-count target would stay flat at 1x.
    # The rows are the longest rollouts' first steps: scaling a short one lands inside the
    # rollouts' lengths, where the measured rate per token may well be lower.
    first = step_table.filter(pl.col("steps_ratio") == 0.0)
    x = features_of(first.filter(pl.col("output_length") == first["output_length"].max()))[:20]
    longer = x.copy()
    longer[:, FEATURE_NAMES.index("output_length")] *= 4
    rows = PredictionBatch(tuple(str(i) for i in range(len(x))), (0.9,), x)
    rows_long = PredictionBatch(tuple(str(i) for i in range(len(x))), (0.9,), longer)
    ratio = trained.predictor.predict_rows(rows_long) / trained.predictor.predict_rows(rows)
    assert np.median(ratio) > 1.5 and (ratio > 1.0).all()


def test_load_rejects_a_booster_with_another_target(tmp_path, trained):
    import json

    trained.predictor.save(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    (tmp_path / "meta.json").write_text(json.dumps({**meta, "target": "log(remaining steps)"}))
    with pytest.raises(ValueError, match="retrain the predictor"):
        LightGBMPredictor.load(tmp_path)
