"""Remaining-step predictions, refreshed in batches every ``k`` steps of a request."""
from __future__ import annotations

import logging
from typing import Sequence

import numpy as np

from dilaserve.control.request import TrackedRequest
from dilaserve.predict.base import PredictionBatch, StepPredictor

log = logging.getLogger(__name__)


class PredictionCache:
    """Keeps each request's predicted remaining steps (one row per candidate threshold).

    Between refreshes the prediction is scaled by the share of masked tokens still left
    since the refresh, which tracks progress whatever thresholds the steps used.
    """

    def __init__(self, predictor: StepPredictor, thresholds: Sequence[float], every_k: int):
        self.predictor = predictor
        self.thresholds = tuple(thresholds)
        self.every_k = every_k
        self.calls = 0

    def due(self, req: TrackedRequest) -> bool:
        return req.steps_pred is None or req.state.steps_done - req.pred_step >= self.every_k

    def refresh(self, reqs: Sequence[TrackedRequest]) -> None:
        """Predict for every request in ``reqs`` with one predictor call."""
        if not reqs:
            return
        progress = np.array([r.state.progress_features() for r in reqs])  # rows of equal length
        batch = PredictionBatch.build([r.request_id for r in reqs], progress, self.thresholds)
        pred = self.predictor.predict(batch)
        self.calls += 1
        # Plain floats: threshold selection reads them one request at a time.
        for r, row in zip(reqs, pred.tolist()):
            r.steps_pred = tuple(row)
            r.pred_masked = max(r.masked_left, 1)
            r.pred_step = r.state.steps_done

    def refresh_due(self, reqs: Sequence[TrackedRequest]) -> int:
        due = [r for r in reqs if self.due(r)]
        self.refresh(due)
        return len(due)

    @staticmethod
    def steps_left(reqs: Sequence[TrackedRequest]) -> np.ndarray:
        """Current estimate of remaining steps, ``(len(reqs), n_thresholds)``, at least 1."""
        pred = np.array([r.steps_pred for r in reqs], dtype=np.float64)
        scale = np.array([r.masked_left / r.pred_masked for r in reqs])
        return np.maximum(pred * scale[:, None], 1.0)

    @staticmethod
    def steps_left_at(req: TrackedRequest, j: int) -> float:
        """One entry of :meth:`steps_left` (threshold index ``j``) in plain Python, same number."""
        return max(req.steps_pred[j] * (req.masked_left / req.pred_masked), 1.0)
