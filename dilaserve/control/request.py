"""The control plane's record of one request.

It wraps the engine's :class:`RequestState` (what decoding needs) with what scheduling
needs (deadline, priority, thresholds, placement, predictions), so the engine's state stays
free of policy fields and can be shipped between instances as is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dilaserve.engine.state import RequestState


@dataclass(eq=False)
class TrackedRequest:
    """One request in flight.

    Thresholds are indices into the controller's ascending candidate tuple.
    ``allowed`` holds the candidates at or above the request's quality floor; load control
    narrows it further through ``cap_index`` (the highest threshold the cluster can afford
    for it), and threshold selection picks ``threshold_index`` at or below the cap.
    """

    state: RequestState
    arrival: float
    #: Absolute time by which the request should finish (arrival + its own SLO).
    deadline: float
    #: Larger is more important; high-priority requests are capped last by load control.
    priority: int = 0
    #: Lowest threshold the client accepts (a quality floor); 0 allows every candidate.
    min_threshold: float = 0.0

    allowed: np.ndarray | None = None
    cap_index: int = -1
    threshold_index: int = -1
    instance: str | None = None
    #: Predicted remaining steps per candidate threshold at the last refresh.
    steps_pred: tuple[float, ...] | None = None
    #: The predictor's raw row on arrival (before calibration), kept to calibrate it.
    first_pred: tuple[float, ...] | None = None
    pred_masked: int = 0
    pred_step: int = -1
    #: The SLO had already passed when the request arrived (served best-effort at the lowest threshold).
    late_on_arrival: bool = False
    #: Load control has counted the request among recent arrivals (the work that arrives
    #: within a horizon, :class:`~dilaserve.control.policies.Outlook`).
    in_outlook: bool = False
    #: Work (token-steps) and expected hits on arrival, as rationing judges the request
    #: (:mod:`dilaserve.control.rationing`).
    ration_work: float = 0.0
    ration_value: float = 0.0
    finish_time: float | None = None
    #: Masked tokens left, refreshed whenever the state changes (saves a scan per lookup).
    masked_left: int = field(default=0)
    _tokens: int = field(default=0, init=False, repr=False)
    _sort_key: tuple = field(default=(), init=False, repr=False)

    def __post_init__(self) -> None:
        self.masked_left = self.state.gen_length - self.state.num_unmasked
        # Fixed for the request's life (prompt and canvas lengths, identity, deadline):
        # kept here because the scheduler reads them for every request on every event.
        self._tokens = self.state.num_tokens
        self._sort_key = (-self.priority, self.deadline, self.arrival, self.state.request_id)

    @property
    def request_id(self) -> str:
        return self.state.request_id

    @property
    def tokens(self) -> int:
        return self._tokens

    @property
    def slo(self) -> float:
        return self.deadline - self.arrival

    def slo_left(self, now: float) -> float:
        return self.deadline - now

    def update_state(self, state: RequestState) -> None:
        if state is not self.state:
            self._tokens = state.num_tokens
        self.state = state
        # from the state's block counters: no scan of the whole canvas on every step
        self.masked_left = state.gen_length - state.num_unmasked

    def sort_key(self) -> tuple:
        """Load-control walk order: priority first, then earliest deadline, then arrival.

        With one SLO for all, deadline order is arrival order, as in the paper.
        """
        return self._sort_key
