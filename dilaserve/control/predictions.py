"""Remaining-step predictions, refreshed in batches every ``k`` steps of a request."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dilaserve.control.request import TrackedRequest
from dilaserve.predict.base import PredictionBatch, StepPredictor

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepCalibration:
    """What online calibration has learned, as data: the log factor over all requests and,
    per length class, its own log factor and the finishes it has seen. A tuner's replay
    starts from the live control plane's (:meth:`PredictionCache.resume`), so the replayed
    admission predicts as the live one does."""

    log_scale: float = 0.0
    #: ``(length class, log factor, finishes seen)`` per class seen
    classes: tuple[tuple[int, float, int], ...] = ()


class PredictionCache:
    """Keeps each request's predicted remaining steps (one row per candidate threshold).

    Between refreshes the prediction is scaled by the share of masked tokens still left
    since the refresh, which tracks progress whatever thresholds the steps used.

    With ``calibrate``, predictions are also multiplied by a running geometric mean of
    (steps a finished request took) / (steps predicted for it on arrival, at the threshold
    it mostly ran at). A predictor trained on other traffic (other lengths, other prompts)
    is then corrected by the traffic it serves, within a few dozen requests; one factor for
    all thresholds, so thresholds that are rarely used never look cheaper than measured.

    The error of a predictor trained on short answers depends on the answer's length:
    measured on ShareGPT-like lengths, a one-block answer took 0.65x its prediction and one
    of 16 blocks or more 3.6x. One factor for all then overstates short answers about 4x and
    understates long ones, so admission refuses short requests that would have made it and
    takes long ones that miss. So the factor is kept per length class (the answer's blocks,
    in powers of two), falling back to the factor over all requests until a class has seen
    ``CALIBRATION_MIN_CLASS`` finishes (docs/architecture.md, "Step prediction").
    """

    #: Weight of one finished request in the running mean (about the last 50 count).
    CALIBRATION_WEIGHT = 0.02
    #: The correction stays within these factors, so one odd request cannot swing it.
    CALIBRATION_RANGE = (0.25, 4.0)
    #: A length class's own factor applies once this many of its requests have finished.
    CALIBRATION_MIN_CLASS = 8

    def __init__(self, predictor: StepPredictor, thresholds: Sequence[float], every_k: int, calibrate: bool = False):
        self.predictor = predictor
        self.thresholds = tuple(thresholds)
        self.every_k = every_k
        self.calibrate = calibrate
        self.calls = 0
        self._log_scale = 0.0
        #: length class -> (log factor, finishes seen)
        self._class_scale: dict[int, tuple[float, int]] = {}
        self.calibrated_on = 0

    @property
    def scale(self) -> float:
        """The factor over all requests (1.0 without calibration)."""
        return float(np.exp(self._log_scale))

    @staticmethod
    def length_class(req: TrackedRequest) -> int:
        """The answer's blocks in powers of two: 0 for one block, 1 for two, 2 for 3-4, ..."""
        # ceil(log2(blocks)) in integers: this runs for every request of every refresh.
        return (max(req.state.num_blocks, 1) - 1).bit_length()

    def scale_for(self, req: TrackedRequest) -> float:
        """The factor ``req``'s predictions are multiplied by: its length class's once that
        class has seen enough finishes, else the factor over all requests."""
        log_scale, seen = self._class_scale.get(self.length_class(req), (0.0, 0))
        return float(np.exp(log_scale if seen >= self.CALIBRATION_MIN_CLASS else self._log_scale))

    def _blend(self, log_scale: float, ratio: float) -> float:
        lo, hi = np.log(self.CALIBRATION_RANGE)
        w = self.CALIBRATION_WEIGHT
        return float(np.clip((1 - w) * log_scale + w * ratio, lo, hi))

    def observe_finish(self, req: TrackedRequest) -> None:
        """Learn from a finished request how far its first prediction was off."""
        if not self.calibrate or req.first_pred is None or not req.state.thresholds_used:
            return
        used = req.state.thresholds_used
        median = float(np.median(used))  # once, not once per candidate threshold
        j = int(np.argmin([abs(t - median) for t in self.thresholds]))
        predicted = max(req.first_pred[j], 1.0)
        ratio = float(np.log(max(req.state.steps_done, 1) / predicted))
        self._log_scale = self._blend(self._log_scale, ratio)
        k = self.length_class(req)
        log_scale, seen = self._class_scale.get(k, (self._log_scale, 0))
        # A class starts from the factor over all requests, so its first finishes refine
        # that rather than replace it.
        self._class_scale[k] = (self._blend(log_scale, ratio), seen + 1)
        self.calibrated_on += 1

    def learned(self) -> StepCalibration:
        """A snapshot of the calibration (the factors of no calibration where it is off)."""
        return StepCalibration(self._log_scale, tuple((k, f, n) for k, (f, n) in sorted(self._class_scale.items())))

    def resume(self, learned: StepCalibration) -> None:
        """Go on from ``learned`` (another cache's :meth:`learned`), as if this cache had seen
        its finishes; nothing where calibration is off."""
        if not self.calibrate:
            return
        self._log_scale = learned.log_scale
        self._class_scale = {k: (f, n) for k, f, n in learned.classes}

    def due(self, req: TrackedRequest) -> bool:
        return req.steps_pred is None or req.state.steps_done - req.pred_step >= self.every_k

    def refresh(self, reqs: Sequence[TrackedRequest]) -> None:
        """Predict for every request in ``reqs`` with one predictor call."""
        if not reqs:
            return
        progress = np.array([r.state.progress_features() for r in reqs])  # rows of equal length
        batch = PredictionBatch.build([r.request_id for r in reqs], progress, self.thresholds)
        raw = self.predictor.predict(batch)
        self.calls += 1
        if self.calibrate:
            pred = raw * np.array([self.scale_for(r) for r in reqs])[:, None]
        else:
            pred = raw
        # Plain floats: threshold selection reads them one request at a time.
        for r, row, raw_row in zip(reqs, pred.tolist(), raw.tolist()):
            if r.first_pred is None:
                r.first_pred = tuple(raw_row)
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
