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
* When it does not fit, ``p`` is the smallest price at which it fits again. Each request
  then drops exactly as far as its own accuracy-for-work trade is worth at that price: the
  drops that save the most work for the least accuracy come first, whichever request they
  belong to (the paper's walk drops the latest requests first, whatever they save).
* No request drops below its **per-work optimum** ``j*(r) = argmax_j acc(j) / w(r, j)``,
  the threshold with the most expected correct answers per token-step. Below it a drop
  loses accuracy faster than it frees capacity, so under overload the cluster serves the
  requests it can at ``j*`` and lets admission refuse the rest, rather than serving all of
  them worse. On a steep quality curve ``j*`` is the highest threshold and nothing drops;
  on a flat one it is a low threshold and the cap falls as the load rises.

The work the cluster must do within the horizon ``H`` is the remaining work of the requests
in flight plus the work of the requests that will arrive meanwhile, estimated by those
admitted over the last ``H`` (each at the work it brought on arrival). What arrives is a
random sum, a compound Poisson count whose standard deviation is ``sqrt(sum w^2)``, and the
work must fit with one standard deviation of it (``spread``). Heavy-tailed request lengths
(ShareGPT) spread it, and the cluster keeps more headroom there; uniform ones (GSM8K) do not,
and the cluster runs closer to its capacity. Without the arrivals, a request would keep a
high threshold on capacity the next arrivals need.

``clearing=False`` (``per_work_price``, an ablation) prices a cluster that does not fit at
full quality at the best accuracy per work, so every cap drops to its per-work optimum.
"""

from __future__ import annotations

import numpy as np

from dilaserve.control.cap_walk import highest_allowed


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
        return highest_allowed(ok)
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
    *,
    clearing: bool = True,
    spread: float = 1.0,
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
        hi = highest_allowed(all_allowed)
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
        w = all_load[rows, j]
        # What arrives is a random sum (how many requests, how large): a compound Poisson
        # count whose standard deviation is sqrt(sum of w^2); ``spread`` of them must fit too.
        return float(w.sum() + spread * np.sqrt(np.square(w[n:]).sum())), j

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
