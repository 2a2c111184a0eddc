"""Load control: none, the paper's cap walk, the cap walk over what can still fit, and that walk
under the price of capacity."""

from __future__ import annotations

import numpy as np

from dilaserve.control.cap_walk import cap_thresholds, highest_allowed, lowest_allowed
from dilaserve.control.capacity_price import price_caps
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
    """The paper's walk (:func:`~dilaserve.control.cap_walk.cap_thresholds`): a request
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
    work expected to arrive within the SLO horizon (with one standard deviation of the
    latter) must fit the capacity over it, and the work due by each deadline the throughput
    times the time left to it (SLO tiers). When it does not, capacity gets the smallest
    price at which it does, and each request's cap drops where ``accuracy - price x work``
    says the drop pays, never below its per-work optimum (the threshold with the most
    accuracy per unit of work). At light load nothing changes (capacity is free); on a
    quality curve steep enough that the highest threshold has the most accuracy per work,
    nothing ever does. Without a threshold-quality table it is ``feasible_prefix``.
    """

    needs_outlook = True
    #: The smallest price at which the work fits; False: once it does not fit at full
    #: quality, the price of a capacity-bound cluster, every cap at its per-work optimum.
    clearing = True
    #: Standard deviations of the arriving work that must fit beside its mean.
    spread = 1.0

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
            spread=self.spread,
            deadlines=outlook.deadlines,
        )


@load_controls.register("per_work_price")
class PerWorkPriceLoadControl(CapacityPriceLoadControl):
    """``capacity_price`` with two prices only: none while the work at full quality fits
    (mean arrivals), else the best accuracy per work, so every cap drops to its per-work
    optimum. It drops further than a mild overload needs where accuracy per work is
    nearly flat across thresholds (long prompts)."""

    clearing = False
    spread = 0.0
