"""Threshold selection: fixed, the paper's SLO walk, and the quality-keeping walk."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dilaserve.control.policies.base import ThresholdSelection, selection_policies
from dilaserve.control.thresholds import highest_fitting, pick_threshold


@selection_policies.register("fixed")
class FixedSelection(ThresholdSelection):
    """Every request at ``ControlConfig.fixed_threshold`` (the static baselines); a request
    whose quality floor is above it runs at its cap (the highest candidate it allows)."""

    needs_predictor = False

    def choose(self, allowed: Sequence[bool], cap: int, remaining_s: Callable[[int], float], slo_left: float) -> int:
        return self.fixed_index if allowed[self.fixed_index] else cap


@selection_policies.register("paper")
class PaperSelection(ThresholdSelection):
    """The paper's walk: the highest allowed threshold whose predicted remaining time fits
    the SLO time left; if none fits, the lowest allowed one (finish as fast as possible)."""

    degrade_late_arrivals = True

    def choose(self, allowed: Sequence[bool], cap: int, remaining_s: Callable[[int], float], slo_left: float) -> int:
        return pick_threshold(allowed, cap, remaining_s, slo_left)


@selection_policies.register("keep_quality")
class KeepQualitySelection(ThresholdSelection):
    """The same walk, but a request that fits at no allowed threshold keeps its cap.

    Lowering its threshold cannot turn its miss into a hit, so it would cost quality for
    nothing; a threshold drops only where the prediction says the drop makes the SLO.
    """

    def choose(self, allowed: Sequence[bool], cap: int, remaining_s: Callable[[int], float], slo_left: float) -> int:
        j = highest_fitting(allowed, cap, remaining_s, slo_left)
        return cap if j is None else j
