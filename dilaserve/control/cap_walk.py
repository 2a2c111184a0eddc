"""The paper's cap walk, the core of load control: cap each request's highest threshold so
the worst case fits (the named load-control pieces that use it are in
:mod:`dilaserve.control.policies.load_control`).

Walk requests in order (priority, then deadline, then arrival); keep suffix sums of the
load every later request would carry at its lowest allowed threshold; keep threshold
gamma for request i only if

    used + ReqLoad(i, gamma) + suffix_min(i + 1) <= capacity

(or gamma is i's lowest), then add ReqLoad(i, cap_i) to ``used``. Requests later in the
walk are capped first, so high-priority requests, walked first, are capped last.
"""

from __future__ import annotations

import numpy as np

from dilaserve.control.thresholds import lowest_allowed


def highest_allowed(allowed: np.ndarray) -> np.ndarray:
    """Index of each row's highest allowed threshold."""
    return allowed.shape[1] - 1 - np.argmax(allowed[:, ::-1], axis=1)


def cap_thresholds(load: np.ndarray, allowed: np.ndarray, capacity: float) -> np.ndarray:
    """Cap index per request, rows already in walk order.

    ``load`` and ``allowed`` are ``(n, t)``, thresholds ascending. Returns ``(n,)`` indices:
    the highest allowed threshold each request may use.
    """
    n = load.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    lo = lowest_allowed(allowed)
    hi = highest_allowed(allowed)
    rows = np.arange(n)
    min_load = load[rows, lo]
    max_load = load[rows, hi]
    # suffix[i] = load of requests i.. at their lowest threshold; suffix[n] = 0.
    suffix = np.zeros(n + 1)
    suffix[:-1] = np.cumsum(min_load[::-1])[::-1]
    # Fast path, vectorised: the longest prefix that keeps its highest threshold.
    used_if_max = np.concatenate(([0.0], np.cumsum(max_load)))
    ok = used_if_max[:-1] + max_load + suffix[1:] <= capacity
    first_bad = n if ok.all() else int(np.argmin(ok))
    caps = hi.copy()
    if first_bad == n:
        return caps
    used = float(used_if_max[first_bad])
    # Sequential part: each cap depends on what earlier requests kept.
    load_l, allowed_l = load.tolist(), allowed.tolist()
    suffix_l = suffix.tolist()
    for i in range(first_bad, n):
        budget = capacity - used - suffix_l[i + 1]
        row, arow = load_l[i], allowed_l[i]
        c = int(lo[i])
        for j in range(int(hi[i]), int(lo[i]), -1):
            if arow[j] and row[j] <= budget:
                c = j
                break
        caps[i] = c
        used += row[c]
    return caps
