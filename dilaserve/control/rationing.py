"""Rationing: which arrivals admission takes when the work arriving exceeds what the cluster
can do (docs/architecture.md, "Rationing under overload").

Goodput counts requests, and each request costs its own work. When more work arrives than
the cluster can do, every admitted token-step displaces work that another arrival needed,
so admitting request ``r`` pays only when its expected hits per unit of work beat those of
the arrivals it displaces. That is the knapsack of the capacity price again, with refusal
as one more choice (value 0, work 0): its Lagrangian admits ``r`` iff

    acc(r) / w(r) >= p

where ``p`` is the density at which the arrivals of the last window, best density first,
fill the work the cluster can do in that window. While the arrivals fit, ``p = 0`` and
rationing refuses nothing: the SLO check alone decides, as for a static server. Under
overload the cluster takes the arrivals with the most hits per token-step. With heavy-tailed
answer lengths (ShareGPT-like) the short requests carry a far smaller share of the work than
of the requests, so a cluster short of capacity makes more of them than it would taking the
arrivals first come, first served.

Each arrival is judged at its per-work optimum (the threshold with the most accuracy per
token-step among those it may run, where the capacity price holds it under overload), and
refused arrivals count too: they are the demand.
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: How far inside the capacity the running work total must lie to be trusted unchecked.
_RUNNING_SLACK = 1e-6


class WorkRation:
    """The density cutoff of the arrivals over the last ``window_s`` seconds.

    Args:
        window_s: how far back the arrivals are counted.
        utilisation: the share of the cluster's best throughput the admitted work may fill
            (the rest absorbs bursts and batches below the best size).
    """

    def __init__(self, window_s: float, utilisation: float = 1.0):
        if window_s <= 0:
            raise ValueError(f"rationing window {window_s} s must be positive (try 10)")
        if not 0 < utilisation <= 1:
            raise ValueError(f"rationing utilisation {utilisation} must lie in (0, 1] (try 1.0)")
        self.window_s = window_s
        self.utilisation = utilisation
        #: ``(arrival, work, value)`` of the arrivals over the window, oldest first.
        self._arrivals: deque[tuple[float, float, float]] = deque()
        #: The window's work, kept as arrivals come and go: while it clearly fits, every
        #: arrival is priced at 0 without building the window's arrays (the common case,
        #: asked at every arrival). Resynchronised with the exact sum wherever that is taken.
        self._work = 0.0

    def observe(self, now: float, work: float, value: float) -> None:
        """Count one arrival: its work (token-steps) and expected hits (its accuracy)."""
        work = max(work, 1e-9)
        self._arrivals.append((now, work, value))
        self._work += work
        while self._arrivals and self._arrivals[0][0] <= now - self.window_s:
            self._work -= self._arrivals.popleft()[1]
        if not self._arrivals:
            self._work = 0.0

    def cutoff(self, throughput: float) -> float:
        """The least hits per token-step admitted at ``throughput`` token-steps per second
        (0 while the window's arrivals fit)."""
        if not self._arrivals or throughput <= 0:
            return 0.0
        capacity = self.utilisation * throughput * self.window_s
        # The running total drifts by rounding alone: trusted only well inside the capacity,
        # so the answer is the exact sum's.
        if self._work <= capacity * (1.0 - _RUNNING_SLACK):
            return 0.0
        rows = np.array(self._arrivals)
        self._work = float(rows[:, 1].sum())
        if self._work <= capacity:
            return 0.0
        density = rows[:, 2] / rows[:, 1]
        order = np.argsort(-density, kind="stable")
        filled = np.cumsum(rows[order, 1])
        # The first arrival, best density first, that no longer fits sets the price.
        return float(density[order[int(np.searchsorted(filled, capacity, side="right"))]])

    def admits(self, work: float, value: float, throughput: float) -> bool:
        return value / max(work, 1e-9) >= self.cutoff(throughput)
