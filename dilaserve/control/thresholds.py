"""SLO-aware threshold selection (docs/architecture.md section 5).

Walk a request's allowed thresholds from high to low and take the first whose predicted
remaining time fits the SLO time left; if none fits, take the lowest allowed one.

The scheduler selects for the few requests of one stepped batch at a time, so the walk is
plain Python per request (:func:`pick_threshold`): on rows of five thresholds numpy's
per-call cost is far above the arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

#: The candidate confidence thresholds, ascending. The one declaration: the controller's,
#: the server's, the pipeline's rollouts, the benchmarks' and the notebooks' defaults all
#: read it, so a candidate set changes in one place.
CANDIDATE_THRESHOLDS: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9)


def pinned_threshold(thresholds: Sequence[float], pin: float, floor: float) -> float:
    """The threshold a request with quality floor ``floor`` runs at where its tier is pinned
    to ``pin``: the pin, or where the pin is below the floor, the lowest candidate at or
    above the floor (the highest candidate where none is): the client asked for at least
    that quality."""
    if pin >= floor - 1e-12:
        return pin
    return min((t for t in thresholds if t >= floor - 1e-12), default=max(thresholds))


def lowest_allowed(allowed: np.ndarray) -> np.ndarray:
    """Index of each row's lowest allowed threshold (0 when a row allows none)."""
    return np.argmax(allowed, axis=1)


def lowest_allowed_at_or_below(allowed: Sequence[bool], cap: int) -> int:
    """The lowest allowed index <= ``cap`` (0 when none is allowed)."""
    for j in range(cap + 1):
        if allowed[j]:
            return j
    return 0


def highest_fitting(
    allowed: Sequence[bool], cap: int, remaining_s: Callable[[int], float], slo_left: float
) -> int | None:
    """The highest allowed index <= ``cap`` whose remaining time fits ``slo_left``, else None.

    Walking down from the cap asks for the remaining time only until the first fit, so a
    request that fits at its cap costs one evaluation.
    """
    for j in range(cap, -1, -1):
        if allowed[j] and remaining_s(j) <= slo_left:
            return j
    return None


def pick_threshold(allowed: Sequence[bool], cap: int, remaining_s: Callable[[int], float], slo_left: float) -> int:
    """The paper's walk for one request: the highest allowed index <= ``cap`` whose remaining
    time fits ``slo_left``, else the lowest allowed index <= ``cap`` (0 when none is allowed).

    ``allowed`` runs over the thresholds in ascending order; ``remaining_s(j)`` is the
    remaining time at threshold ``j``, asked for only where the walk needs it (mostly the
    first allowed index below the cap).
    """
    j = highest_fitting(allowed, cap, remaining_s, slo_left)
    return lowest_allowed_at_or_below(allowed, cap) if j is None else j


def walk_thresholds(allowed: np.ndarray, remaining_s: np.ndarray, slo_left: np.ndarray) -> np.ndarray:
    """Chosen threshold index per request (:func:`pick_threshold` over the rows).

    ``allowed`` and ``remaining_s`` are ``(m, t)`` with thresholds ascending along ``t``;
    ``slo_left`` is ``(m,)`` seconds. Returns the highest allowed index whose remaining time
    fits, else the lowest allowed index.
    """
    top = allowed.shape[1] - 1
    picks = [
        pick_threshold(a, top, rem.__getitem__, s)
        for a, rem, s in zip(allowed.tolist(), remaining_s.tolist(), np.asarray(slo_left).tolist())
    ]
    return np.array(picks, dtype=np.int64)
