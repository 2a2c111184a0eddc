"""The price of capacity: a load-aware cap on thresholds (docs/architecture.md, "The price of
capacity").

Goodput counts a request once it is on time *and* correct. A threshold buys a request
accuracy ``acc(j)`` with work ``w(r, j)`` (its remaining token-steps, the load-control
unit). The cluster has a fixed amount of work it can do within the SLO horizon, so each
request's choice is a knapsack item, and the Lagrangian relaxation of that knapsack reads:
give request ``r`` the threshold that maximises

    acc(j) - p * w(r, j)

where ``p >= 0`` is the price of a token-step of capacity. The price follows from the load:

* While the work the cluster must do within the horizon, every request at its highest
  allowed threshold, fits what it can do, capacity is free (``p = 0``) and every request
  keeps its highest allowed threshold: quality costs nothing at light load.
* When it does not fit, the cluster is capacity-bound, and a token-step is worth what the
  best use of it buys: the most accuracy per unit of work any request gets,
  ``p = max_j acc(j) / w(r, j)``. At that price ``acc(j) - p w(r, j)`` peaks at the
  **per-work optimum** ``j*(r) = argmax_j acc(j) / w(r, j)``, so every request's cap drops
  to its ``j*``. Below ``j*`` a drop loses accuracy faster than it frees capacity, so under
  overload the cluster serves the requests it can at ``j*`` and admission refuses the rest,
  rather than serving all of them worse. On a steep quality curve ``j*`` is the highest
  threshold and nothing drops; on a flat one it is a low threshold.
* ``clearing=True`` takes instead the smallest price at which the work fits (the fluid
  optimum): each request drops only as far as its own trade is worth at that price, the
  drops that free the most work per point of accuracy first. It runs the cluster at its
  capacity, where bursts and the growth of batches make requests miss; measured on the
  paper setting it lands below the static frontier, and it stays as an ablation
  (``clearing_price``).

The work the cluster must do within the horizon ``H`` is the remaining work of the requests
in flight plus the work of the requests that will arrive meanwhile, estimated by those
admitted over the last ``H`` (each at the work it brought on arrival). It fits when it is at
most the capacity over ``H``: the cluster can finish what it holds in time *and* keep pace
with arrivals. Without the second term a request keeps a high threshold on capacity the
next arrivals need. The test runs at every request's highest allowed threshold, not at the
caps it sets, so dropping thresholds does not switch the price off again on the next call.
"""

from __future__ import annotations

import numpy as np


def per_work_optimum(accuracy: np.ndarray, load: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """``j*(r)``: each row's allowed index with the most accuracy per unit of work.

    ``accuracy`` is ``(t,)`` over the ascending candidates, ``load`` and ``allowed`` ``(n, t)``.
    Ties go to the higher threshold (the same return per work, with more quality per request).
    """
    ratio = np.where(allowed, accuracy[None, :] / np.maximum(load, 1e-12), -np.inf)
    # argmax of the reversed rows: the last (highest) index among equal ratios.
    return ratio.shape[1] - 1 - np.argmax(ratio[:, ::-1], axis=1)


def _choice(accuracy: np.ndarray, load: np.ndarray, ok: np.ndarray, price: float) -> np.ndarray:
    """argmax of ``acc - price x load`` over ``ok`` per row; ties to the lower work (lower index),
    except at price 0, where the highest ``ok`` index (the cap) wins."""
    if price <= 0.0:
        return ok.shape[1] - 1 - np.argmax(ok[:, ::-1], axis=1)
    value = np.where(ok, accuracy[None, :] - price * load, -np.inf)
    return np.argmax(value, axis=1)


def _cheapest(load: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Each row's least-work candidate: the choice beyond every breakpoint price, which is
    the row's per-work optimum when work rises with the threshold."""
    return np.argmin(np.where(ok, load, np.inf), axis=1)


def _breakpoints(accuracy: np.ndarray, load: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Every price at which some row's choice can change: ``(acc_j - acc_i) / (w_j - w_i)``
    over allowed pairs ``i < j`` of a row whose work rises with the threshold."""
    t = accuracy.shape[0]
    prices = []
    for i in range(t):
        for j in range(i + 1, t):
            dw = load[:, j] - load[:, i]
            use = ok[:, i] & ok[:, j] & (dw > 0)
            if accuracy[j] > accuracy[i] and use.any():
                prices.append((accuracy[j] - accuracy[i]) / dw[use])
    return np.unique(np.concatenate(prices)) if prices else np.zeros(0)


def price_caps(
    accuracy: np.ndarray,
    load: np.ndarray,
    allowed: np.ndarray,
    caps: np.ndarray,
    capacity: float,
    arrivals_load: np.ndarray | None = None,
    arrivals_allowed: np.ndarray | None = None,
    clearing: bool = False,
) -> np.ndarray:
    """Caps of the requests in flight under the price of capacity.

    ``load`` / ``allowed`` ``(n, t)`` and ``caps`` ``(n,)`` are the requests in flight and the
    caps another load control left them; ``arrivals_load`` / ``arrivals_allowed`` ``(m, t)``
    are the expected arrivals within the horizon (priced alongside, never capped here);
    ``capacity`` is in the loads' units over the same horizon. A request's new cap lies in
    ``[j*(r), caps(r)]``; where ``caps(r)`` is already below ``j*(r)`` it stays.
    """
    n, t = load.shape
    if n == 0:
        return caps
    if arrivals_load is not None and len(arrivals_load):
        all_load = np.concatenate([load, arrivals_load])
        all_allowed = np.concatenate([allowed, arrivals_allowed])
        hi = all_allowed.shape[1] - 1 - np.argmax(all_allowed[:, ::-1], axis=1)
        all_caps = np.concatenate([caps, hi[n:]])
    else:
        all_load, all_allowed, all_caps = load, allowed, caps
    idx = np.arange(t)[None, :]
    floor = per_work_optimum(accuracy, all_load, all_allowed)
    # Candidates of a row: allowed, at most its cap, at least its per-work optimum (a row
    # whose cap is below it keeps just the cap).
    ok = all_allowed & (idx <= all_caps[:, None]) & (idx >= np.minimum(floor, all_caps)[:, None])
    ok[np.arange(len(all_caps)), all_caps] = True
    rows = np.arange(len(all_caps))

    def demand(price: float) -> tuple[float, np.ndarray]:
        j = _choice(accuracy, all_load, ok, price)
        return float(all_load[rows, j].sum()), j

    total, _ = demand(0.0)
    if total <= capacity:
        return caps
    if not clearing:
        return _cheapest(all_load, ok)[:n].astype(np.int64)
    prices = _breakpoints(accuracy, all_load, ok)
    # Demand falls as the price rises: the smallest breakpoint price at which it fits.
    lo, hi_i = 0, len(prices)
    best = None
    while lo < hi_i:
        mid = (lo + hi_i) // 2
        total, j = demand(float(prices[mid]))
        if total <= capacity:
            best, hi_i = j, mid
        else:
            lo = mid + 1
    if best is None:
        # Nothing fits even at the highest price: every request at its cheapest candidate
        # (the price beyond every breakpoint), which is its per-work optimum.
        best = _cheapest(all_load, ok)
    return best[:n].astype(np.int64)
