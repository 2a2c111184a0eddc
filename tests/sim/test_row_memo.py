"""The replay's predictor memo answers a request's rows as the predictor it wraps does,
and asks that predictor only for rows it has not seen."""

from __future__ import annotations

import numpy as np
import pytest

from dilaserve.predict.base import OneShotPredictor, PredictionBatch, StepPredictor
from dilaserve.predict.row_memo import RowMemo

THRESHOLDS = (0.5, 0.7, 0.9)


class _Counting(StepPredictor):
    name = "counting"

    def __init__(self):
        self.inner = OneShotPredictor({0.5: 0.3, 0.7: 0.5, 0.9: 0.8})
        self.rows = 0

    def predict_rows(self, batch: PredictionBatch) -> np.ndarray:
        self.rows += len(batch.features)
        return self.inner.predict_rows(batch)


def _batch(progress: np.ndarray) -> PredictionBatch:
    return PredictionBatch.build([f"r{i}" for i in range(len(progress))], progress, THRESHOLDS)


def _progress(rng: np.random.Generator, n: int) -> np.ndarray:
    p = rng.random((n, 10))
    p[:, 0] = rng.integers(32, 512, n)
    return p


def test_remembered_answers_are_the_wrapped_predictors_and_cost_no_call():
    rng = np.random.default_rng(0)
    inner = _Counting()
    memo = RowMemo(inner)
    first = _progress(rng, 20)
    assert np.array_equal(memo.predict(_batch(first)), inner.predict(_batch(first)))
    asked = inner.rows
    # Half the requests again (in another order), half new: only the new ones are asked.
    mixed = np.concatenate([first[::-2], _progress(rng, 10)])
    out = memo.predict(_batch(mixed))
    assert inner.rows - asked == 10 * len(THRESHOLDS)
    assert np.array_equal(out, inner.inner.predict(_batch(mixed)))
    assert memo.hits == 10 and memo.misses == 30


def test_the_memo_empties_rather_than_grow_past_its_bound():
    rng = np.random.default_rng(1)
    memo = RowMemo(_Counting(), max_requests=15)
    for _ in range(4):
        p = _progress(rng, 10)
        assert np.array_equal(memo.predict(_batch(p)), memo.inner.inner.predict(_batch(p)))
        assert len(memo._memo) <= 15
    with pytest.raises(ValueError, match="max_requests"):
        RowMemo(_Counting(), max_requests=0)
