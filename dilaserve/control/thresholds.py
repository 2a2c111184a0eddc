"""SLO-aware threshold selection (DESIGN.md section 5).

Walk a request's allowed thresholds from high to low and take the first whose predicted
remaining time fits the SLO time left; if none fits, take the lowest allowed one.
"""
from __future__ import annotations

import numpy as np


def allowed_below_cap(allowed: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """``allowed`` (m, t) restricted to indices <= each row's ``cap``."""
    idx = np.arange(allowed.shape[1])
    return allowed & (idx[None, :] <= cap[:, None])


def lowest_allowed(allowed: np.ndarray) -> np.ndarray:
    """Index of each row's lowest allowed threshold (0 when a row allows none)."""
    return np.argmax(allowed, axis=1)


def walk_thresholds(allowed: np.ndarray, remaining_s: np.ndarray, slo_left: np.ndarray) -> np.ndarray:
    """Chosen threshold index per request.

    ``allowed`` and ``remaining_s`` are ``(m, t)`` with thresholds ascending along ``t``;
    ``slo_left`` is ``(m,)`` seconds. Returns the highest allowed index whose remaining time
    fits, else the lowest allowed index.
    """
    fits = allowed & (remaining_s <= slo_left[:, None])
    t = allowed.shape[1]
    highest_fit = t - 1 - np.argmax(fits[:, ::-1], axis=1)
    return np.where(fits.any(axis=1), highest_fit, lowest_allowed(allowed))
