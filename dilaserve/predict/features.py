"""The 11 step-predictor features (docs/architecture.md section 4), built in one batch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

FEATURE_NAMES: tuple[str, ...] = (
    "threshold",
    "output_length",
    "steps_ratio",  # steps done / output length
    "unmasked_ratio",  # unmasked / output length
    "block_ratio",  # block index / blocks
    "block_unmasked_ratio",  # unmasked in block / block length
    "conf_min",
    "conf_q25",
    "conf_median",
    "conf_mean",
    "conf_q75",
)


def feature_matrix(progress: np.ndarray, thresholds: Sequence[float]) -> np.ndarray:
    """Cross requests with thresholds: rows are request-major.

    ``progress`` is (n_requests, 10) from ``RequestState.progress_features``;
    the result is (n_requests * n_thresholds, 11), so one predictor call
    covers every request at every threshold.
    """
    progress = np.atleast_2d(np.asarray(progress, dtype=np.float64))
    thr = np.asarray(thresholds, dtype=np.float64)
    n, t = progress.shape[0], thr.shape[0]
    # Two broadcast copies into a (n, t, 11) view: cheaper than tile + repeat on the few
    # rows the control plane predicts per event.
    out = np.empty((n, t, len(FEATURE_NAMES)), dtype=np.float64)
    out[:, :, 0] = thr
    out[:, :, 1:] = progress[:, None, :]
    return out.reshape(n * t, len(FEATURE_NAMES))
