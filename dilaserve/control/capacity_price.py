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

**Deadlines.** One horizon (the latest SLO time left in flight) is the paper's capacity,
and with one SLO for all it is the right one. With SLO tiers it is the batch tier's, twenty
times the interactive tier's, and work that fits it can still miss every earlier deadline.
So before the horizon check, a per-deadline check (:func:`deadline_caps`) walks the
requests in flight earliest deadline first: the work due by each deadline (the requests due
by then, and the expected arrivals whose SLO ends by then) must fit the cluster's throughput
times the time left to it. The first deadline that does not fit raises a price on the
requests due by it, the smallest at which it fits, and the walk goes on (prices only rise,
so an earlier deadline stays fitted). A deadline that does not fit even with every request
due by it at its per-work optimum is left alone: lowering them would cost quality without
turning a miss into a hit. With one SLO for all, the requests due first are the oldest, with
the least work left, and the check rarely binds.

``clearing=False`` (``per_work_price``, an ablation) prices a cluster that does not fit at
full quality at the best accuracy per work, so every cap drops to its per-work optimum.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class Deadlines:
    """What the per-deadline check needs beside the loads.

    Attributes:
        time_left: ``(n,)`` seconds to each in-flight request's deadline.
        throughput: the cluster's token-steps per second (the loads' unit per second).
        arrivals_slo: ``(m,)`` SLO seconds of each recorded arrival.
        window: seconds over which the arrivals were recorded: each stands for one arrival
            like it per ``window`` from now on.
    """

    time_left: np.ndarray
    throughput: float
    arrivals_slo: np.ndarray
    window: float

    def arrivals_due(self, arrivals_work: np.ndarray, time_left: np.ndarray) -> np.ndarray:
        """Expected work of the arrivals due within each of ``time_left``: an arrival like
        recorded one ``i`` comes within ``t - slo_i`` to be due by ``t``, at rate
        ``1 / window``."""
        if not len(arrivals_work) or self.window <= 0:
            return np.zeros(len(time_left))
        # sum over slo_i < t of w_i (t - slo_i), from prefix sums over the SLOs in order:
        # O((n + m) log m) rather than an n x m table on every arrival.
        order = np.argsort(self.arrivals_slo, kind="stable")
        slo = self.arrivals_slo[order]
        work = np.concatenate(([0.0], np.cumsum(arrivals_work[order])))
        work_slo = np.concatenate(([0.0], np.cumsum(arrivals_work[order] * slo)))
        k = np.searchsorted(slo, time_left, side="left")
        return np.maximum(time_left * work[k] - work_slo[k], 0.0) / self.window


def _row_breakpoints(accuracy: np.ndarray, load: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """:func:`_breakpoints` row by row: ``(n, pairs)``, NaN where a pair cannot change the
    row's choice."""
    t = accuracy.shape[0]
    cols = []
    for i in range(t):
        for j in range(i + 1, t):
            dw = load[:, j] - load[:, i]
            use = ok[:, i] & ok[:, j] & (dw > 0) & (accuracy[j] > accuracy[i])
            cols.append(np.where(use, (accuracy[j] - accuracy[i]) / np.where(use, dw, 1.0), np.nan))
    return np.stack(cols, axis=1) if cols else np.zeros((load.shape[0], 0))


def _choice_at(accuracy: np.ndarray, load: np.ndarray, ok: np.ndarray, price: np.ndarray) -> np.ndarray:
    """:func:`_choice` with a price per row (``(n,)``)."""
    value = np.where(ok, accuracy[None, :] - price[:, None] * load, -np.inf)
    return np.where(price > 0, np.argmax(value, axis=1), highest_allowed(ok))


def deadline_caps(
    accuracy: np.ndarray,
    load: np.ndarray,
    ok: np.ndarray,
    caps: np.ndarray,
    deadlines: Deadlines,
    arrivals_work: np.ndarray,
) -> np.ndarray:
    """Caps of the in-flight rows (``load`` / ``ok`` ``(n, t)``, ``caps`` ``(n,)``, every
    ``caps[r]`` in ``ok[r]``) after the per-deadline check; ``arrivals_work`` ``(m,)`` is
    what each recorded arrival brings at the least work it may run (what arrives due by a
    deadline is at least that)."""
    n = load.shape[0]
    live = np.flatnonzero(deadlines.time_left > 0)  # a request past its deadline misses anyway
    if not len(live):
        return caps
    order = live[np.argsort(deadlines.time_left[live], kind="stable")]
    left = deadlines.time_left[order]
    room = deadlines.throughput * left - deadlines.arrivals_due(arrivals_work, left)
    least = np.cumsum(load[order, _cheapest(load[order], ok[order])])
    # Deadlines the requests due by them cannot make even at their per-work optimum are
    # left alone.
    skip = least > room
    price = np.zeros(n)
    j = caps.copy()
    for _ in range(len(order)):
        due = np.cumsum(load[order, j[order]])
        over = (due > room) & ~skip
        if not over.any():
            break
        # The earliest deadline over: the smallest extra price on the requests due by it at
        # which it fits. Demand falls as the price rises, and at the prefix's highest
        # breakpoint every row is at its cheapest, which fits: bisect between.
        k = int(np.argmax(over))
        prefix = order[: k + 1]
        sub_load, sub_ok, base = load[prefix], ok[prefix], price[prefix]
        rows = np.arange(k + 1)
        # Every extra price at which a row of the prefix changes its choice: its own
        # breakpoints less the price it already pays.
        extra = _row_breakpoints(accuracy, sub_load, sub_ok) - base[:, None]
        extra = np.unique(extra[np.isfinite(extra) & (extra > 0)])
        lo, hi_i = 0, len(extra) - 1
        while lo < hi_i:
            mid = (lo + hi_i) // 2
            if sub_load[rows, _choice_at(accuracy, sub_load, sub_ok, base + extra[mid])].sum() <= room[k]:
                hi_i = mid
            else:
                lo = mid + 1
        hi = float(extra[hi_i]) if len(extra) else 0.0
        trial = _choice_at(accuracy, sub_load, sub_ok, base + hi)
        if sub_load[rows, trial].sum() > room[k]:
            skip[k] = True  # no price fits it (ties at the cheapest): leave it
            continue
        price[prefix] += hi
        j[prefix] = trial
    return j


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
    deadlines: Deadlines | None = None,
) -> np.ndarray:
    """Caps of the requests in flight under the price of capacity.

    ``load`` / ``allowed`` ``(n, t)`` and ``caps`` ``(n,)`` are the requests in flight and the
    caps another load control left them; ``arrivals_load`` / ``arrivals_allowed`` ``(m, t)``
    are the expected arrivals within the horizon (priced alongside, never capped here);
    ``capacity`` is in the loads' units over the same horizon. A request's new cap lies in
    ``[j*(r), caps(r)]``; where ``caps(r)`` is already below ``j*(r)`` it stays. With
    ``deadlines`` (and ``clearing``), the per-deadline check runs first
    (:func:`deadline_caps`).
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
    if deadlines is not None and clearing:
        least = all_load[rows[n:], _cheapest(all_load[n:], ok[n:])]
        all_caps = all_caps.copy()
        all_caps[:n] = deadline_caps(accuracy, all_load[:n], ok[:n], all_caps[:n], deadlines, least)
        ok &= idx <= all_caps[:, None]
        ok[rows, all_caps] = True

    def demand(price: float) -> tuple[float, np.ndarray]:
        j = _choice(accuracy, all_load, ok, price)
        w = all_load[rows, j]
        # What arrives is a random sum (how many requests, how large): a compound Poisson
        # count whose standard deviation is sqrt(sum of w^2); ``spread`` of them must fit too.
        return float(w.sum() + spread * np.sqrt(np.square(w[n:]).sum())), j

    total, _ = demand(0.0)
    if total <= capacity:
        return all_caps[:n].astype(np.int64)
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
