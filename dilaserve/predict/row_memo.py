"""A step predictor's answers remembered by feature rows, for the tuner's replays.

The tuner replays one window once per candidate point, every candidate on the same
requests with the same replayed step outcomes, and consecutive windows overlap. A request
run at the same thresholds reaches the same progress features under every candidate (and
every request arrives with the same features under all of them), so most of a replay's
predictor calls ask again what an earlier candidate asked. :class:`RowMemo` answers those
from memory and sends only the new requests to the predictor it wraps.

Only for predictors whose answer for a request is a function of its feature rows alone
(LightGBM, one-shot; not the oracle, which looks requests up by id), and independent of
the other requests in the call: then a remembered answer is the number a fresh call gives.
"""

from __future__ import annotations

import numpy as np

from dilaserve.predict.base import PredictionBatch, StepPredictor


class RowMemo(StepPredictor):
    """Args:
    inner: the predictor whose answers are remembered.
    max_requests: the memo is emptied when it would hold more requests' rows than this
        (about 0.6 KB each with five thresholds).
    """

    def __init__(self, inner: StepPredictor, max_requests: int = 50_000):
        if max_requests < 1:
            raise ValueError(f"RowMemo max_requests={max_requests} must be at least 1 (e.g. 50_000)")
        self.inner = inner
        self.name = inner.name
        self.max_requests = max_requests
        self._memo: dict[bytes, np.ndarray] = {}
        self.hits = 0
        self.misses = 0

    def predict_rows(self, batch: PredictionBatch) -> np.ndarray:
        n, t = batch.shape
        if n == 0:
            return np.zeros(0)
        features = np.ascontiguousarray(batch.features, dtype=np.float64)
        keys = [row.tobytes() for row in features.reshape(n, -1)]  # one request's t rows each
        memo = self._memo
        found = [memo.get(k) for k in keys]
        missed = [i for i, v in enumerate(found) if v is None]
        self.misses += len(missed)
        self.hits += n - len(missed)
        if missed:
            rows = features.reshape(n, t, -1)[missed].reshape(len(missed) * t, -1)
            sub = PredictionBatch(tuple(batch.request_ids[i] for i in missed), batch.thresholds, rows)
            fresh = np.asarray(self.inner.predict_rows(sub), dtype=np.float64).reshape(len(missed), t)
            if len(memo) + len(missed) > self.max_requests:
                memo.clear()
            for k, i in enumerate(missed):
                found[i] = memo[keys[i]] = fresh[k].copy()
        return np.concatenate(found)
