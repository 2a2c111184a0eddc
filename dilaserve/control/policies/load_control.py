"""Load control: none, the paper's cap walk, the cap walk over what can still fit, and that walk
under the price of capacity."""

from __future__ import annotations

import numpy as np

from dilaserve.control.capacity_price import price_caps
from dilaserve.control.load_control import cap_thresholds, highest_allowed, lowest_allowed
from dilaserve.control.policies.base import LoadControl, Outlook, load_controls


@load_controls.register("none")
class NoLoadControl(LoadControl):
    """Every request may use its highest allowed threshold."""

    def caps(
        self, load: np.ndarray, allowed: np.ndarray, capacity: float, outlook: Outlook | None = None
    ) -> np.ndarray:
        return highest_allowed(allowed)


@load_controls.register("paper")
class PaperLoadControl(LoadControl):
    """The paper's walk (:func:`~dilaserve.control.load_control.cap_thresholds`): a request
    keeps a threshold only if the work before it, its own at that threshold and everyone
    after it at their lowest still fit; otherwise it drops, to its lowest if need be."""

    def caps(
        self, load: np.ndarray, allowed: np.ndarray, capacity: float, outlook: Outlook | None = None
    ) -> np.ndarray:
        return cap_thresholds(load, allowed, capacity)


@load_controls.register("feasible_prefix")
class FeasiblePrefixLoadControl(LoadControl):
    """The paper's walk over the requests that can still fit, and no cap for the rest.

    When even every request at its lowest threshold overflows the capacity, the requests
    last in the walk miss whatever their thresholds; the paper's walk still drops all of
    them to their lowest. Here the walk runs over the longest prefix whose lowest-threshold
    load fits, and the requests after it keep their highest threshold: lowering them
    would cost quality without turning a miss into a hit.
    """

    def caps(
        self, load: np.ndarray, allowed: np.ndarray, capacity: float, outlook: Outlook | None = None
    ) -> np.ndarray:
        n = load.shape[0]
        caps = highest_allowed(allowed)
        if n == 0:
            return caps
        min_load = load[np.arange(n), lowest_allowed(allowed)]
        fit = int(np.searchsorted(np.cumsum(min_load), capacity, side="right"))
        if fit:
            caps[:fit] = cap_thresholds(load[:fit], allowed[:fit], capacity)
        return caps


@load_controls.register("capacity_price")
class CapacityPriceLoadControl(FeasiblePrefixLoadControl):
    """``feasible_prefix``, then the price of capacity
    (:func:`~dilaserve.control.capacity_price.price_caps`).

    The cap walk protects the requests in flight; it does not see the requests that arrive
    next, so at a load near capacity every request keeps the highest threshold that makes
    its own SLO and spends capacity later arrivals need. Here the work in flight plus the
    work expected to arrive within the SLO horizon, every request at its highest allowed
    threshold, must fit the capacity over it. When it does not, the cluster is
    capacity-bound: a token-step is worth the most accuracy any request can buy with it, so
    each request's cap drops to its per-work optimum (the threshold with the most accuracy
    per unit of work). At light load nothing changes (capacity is free); on a quality curve
    steep enough that the highest threshold has the most accuracy per work, nothing ever
    does. Without a threshold-quality table it is ``feasible_prefix``.
    """

    needs_outlook = True
    #: Use the smallest price at which the work fits instead (``clearing_price``).
    clearing = False

    def caps(
        self, load: np.ndarray, allowed: np.ndarray, capacity: float, outlook: Outlook | None = None
    ) -> np.ndarray:
        caps = super().caps(load, allowed, capacity)
        if outlook is None or load.shape[0] == 0:
            return caps
        return price_caps(
            outlook.accuracy,
            load,
            allowed,
            caps,
            capacity,
            outlook.arrivals_load,
            outlook.arrivals_allowed,
            clearing=self.clearing,
        )


@load_controls.register("clearing_price")
class ClearingPriceLoadControl(CapacityPriceLoadControl):
    """``capacity_price`` with the smallest price at which the work fits: each request drops
    only as far as its trade of accuracy for work is worth at that price, so the cluster
    runs at its capacity rather than below it (the fluid optimum, blind to bursts)."""

    clearing = True
