"""The three pieces of a threshold policy, each a small class picked by name.

* :class:`ThresholdSelection`: which threshold a placed request runs its next steps at.
* :class:`LoadControl`: how high each in-flight request's threshold may go, so the work the
  cluster holds fits what it can finish in time.
* :class:`Admission`: whether a new request is taken at all.

The :class:`~dilaserve.control.controller.ThresholdController` computes predictions,
remaining times and loads once and hands them to these pieces, so each algorithm (the
paper's, the quality-aware ones, the fixed-threshold baselines) is a few lines that differ
in one decision (docs/architecture.md, "Threshold policies").
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dilaserve.control.capacity_price import Deadlines
from dilaserve.control.config import ControlConfig
from dilaserve.utils.registry import Registry


class ThresholdSelection(abc.ABC):
    """Picks a request's threshold index at or below its cap."""

    #: Needs remaining-step predictions (False only for fixed thresholds).
    needs_predictor: bool = True
    #: A request whose SLO passed before it arrived runs at its lowest allowed threshold
    #: (the paper's best effort). False keeps its quality: nothing it does can meet the SLO.
    degrade_late_arrivals: bool = False

    def __init__(self, config: ControlConfig):
        #: Index of ``ControlConfig.fixed_threshold`` among the ascending candidates.
        self.fixed_index = config.index_of(config.fixed_threshold)

    @abc.abstractmethod
    def choose(self, allowed: Sequence[bool], cap: int, remaining_s: Callable[[int], float], slo_left: float) -> int:
        """The threshold index for one request.

        ``allowed`` runs over the candidates in ascending order; ``cap`` is the highest index
        load control leaves it; ``remaining_s(j)`` is its predicted remaining seconds at
        index ``j`` on its instance (only called where the walk needs it).
        """


@dataclass(frozen=True)
class Outlook:
    """What a load control may know beyond the requests in flight.

    Attributes:
        accuracy: ``(t,)`` the model's measured accuracy at each candidate threshold (the
            threshold-quality table), ascending like the candidates.
        arrivals_load: ``(m, t)`` the work each request admitted over the last SLO horizon
            brought on arrival, at each threshold: the estimate of what arrives next.
        arrivals_allowed: ``(m, t)`` those requests' allowed thresholds.
        deadlines: the in-flight requests' time left, the cluster's throughput and the
            arrivals' SLOs, for the per-deadline check (None: the horizon check alone).
    """

    accuracy: np.ndarray
    arrivals_load: np.ndarray
    arrivals_allowed: np.ndarray
    deadlines: Deadlines | None = None


class LoadControl(abc.ABC):
    """Caps thresholds so the in-flight work fits the cluster's capacity."""

    #: Needs an :class:`Outlook` (the quality table and recent arrivals) to decide.
    needs_outlook: bool = False

    def __init__(self, config: ControlConfig):
        self.config = config

    @abc.abstractmethod
    def caps(
        self, load: np.ndarray, allowed: np.ndarray, capacity: float, outlook: Outlook | None = None
    ) -> np.ndarray:
        """Cap index per request; rows of ``load`` / ``allowed`` ``(n, t)`` in walk order
        (priority, deadline, arrival), thresholds ascending, ``capacity`` in the loads' units
        over the SLO horizon; ``outlook`` is given to a piece that ``needs_outlook``."""


@dataclass(frozen=True)
class Rejection:
    """Why an arrival was refused, and when a retry may be served."""

    reason: str
    retry_after_s: float


class Admission(abc.ABC):
    """Decides, on arrival, whether the request is taken."""

    def __init__(self, config: ControlConfig):
        self.config = config

    @abc.abstractmethod
    def check(
        self, predicted_s: float | None, slo_left: float, harmed: int = 0, wait_s: float = 0.0
    ) -> Rejection | None:
        """``predicted_s``: the request's predicted latency at its lowest allowed threshold on
        the instance it would join, or, when it would wait for room, after that wait
        (``wait_s`` of it); None when it has no prediction. ``harmed``: how many requests
        already there would then miss an SLO they make now. Returns None to admit."""


selection_policies: Registry[type[ThresholdSelection]] = Registry("threshold selection")
load_controls: Registry[type[LoadControl]] = Registry("load control")
admission_policies: Registry[type[Admission]] = Registry("admission policy")
