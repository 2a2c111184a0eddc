"""Remaining-step predictors (docs/architecture.md section 4).

The control plane asks one question: how many denoising steps does each request still need
at each candidate threshold? It asks for all requests and all thresholds in one call, since
per-call overhead (LightGBM's especially) dominates per-row cost.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dilaserve.predict.features import FEATURE_NAMES, feature_matrix

_OUTPUT_LENGTH = FEATURE_NAMES.index("output_length")
_STEPS_RATIO = FEATURE_NAMES.index("steps_ratio")
_THRESHOLD = FEATURE_NAMES.index("threshold")


@dataclass(frozen=True)
class PredictionBatch:
    """Every request crossed with every threshold, request-major.

    ``features`` is ``(len(request_ids) * len(thresholds), 11)`` as built by
    :func:`dilaserve.predict.features.feature_matrix`.
    """

    request_ids: tuple[str, ...]
    thresholds: tuple[float, ...]
    features: np.ndarray

    @classmethod
    def build(cls, request_ids: Sequence[str], progress: np.ndarray, thresholds: Sequence[float]) -> PredictionBatch:
        return cls(tuple(request_ids), tuple(float(t) for t in thresholds), feature_matrix(progress, thresholds))

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.request_ids), len(self.thresholds)


class StepPredictor(abc.ABC):
    """Predicts remaining steps; implementations: one-shot, oracle, LightGBM."""

    #: Short name used in logs, policies and benchmark output.
    name: str = "predictor"

    @abc.abstractmethod
    def predict_rows(self, batch: PredictionBatch) -> np.ndarray:
        """Remaining steps per feature row, shape ``(n * t,)``."""

    def predict(self, batch: PredictionBatch) -> np.ndarray:
        """Remaining steps as ``(n_requests, n_thresholds)``, each at least 1.

        A request that is still running needs at least one more step whatever a model says.
        """
        n, t = batch.shape
        if n == 0:
            return np.zeros((0, t))
        rows = np.asarray(self.predict_rows(batch), dtype=np.float64).reshape(n, t)
        return np.maximum(rows, 1.0)


class OneShotPredictor(StepPredictor):
    """Output length x historical steps-per-token at the threshold, minus steps already done.

    It looks only at what is known on arrival (the baseline of docs/architecture.md section 4);
    thresholds between the historical ones are interpolated.
    """

    name = "oneshot"

    def __init__(self, steps_per_token: Mapping[float, float]):
        if not steps_per_token:
            raise ValueError("OneShotPredictor needs steps-per-token for at least one threshold")
        bad = {k: v for k, v in steps_per_token.items() if not 0 < v <= 1}
        if bad:
            raise ValueError(f"steps per token must lie in (0, 1] (a step commits at least one token): {bad}")
        items = sorted((float(k), float(v)) for k, v in steps_per_token.items())
        self._thr = np.array([k for k, _ in items])
        self._spt = np.array([v for _, v in items])

    def predict_rows(self, batch: PredictionBatch) -> np.ndarray:
        f = batch.features
        out_len = f[:, _OUTPUT_LENGTH]
        done = f[:, _STEPS_RATIO] * out_len
        return out_len * np.interp(f[:, _THRESHOLD], self._thr, self._spt) - done


#: ``truth(request_id, threshold) -> remaining steps`` from the simulator's recorded rollouts.
TruthFn = Callable[[str, float], float]


class OraclePredictor(StepPredictor):
    """True remaining steps, supplied by whoever knows them (the simulator)."""

    name = "oracle"

    def __init__(self, truth: TruthFn):
        self._truth = truth

    def predict_rows(self, batch: PredictionBatch) -> np.ndarray:
        return np.array(
            [self._truth(rid, thr) for rid in batch.request_ids for thr in batch.thresholds],
            dtype=np.float64,
        )
