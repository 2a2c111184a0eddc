"""The load-control pass: every request's cap from the cluster's capacity over the SLO
horizon (docs/architecture.md section 5, "Load control").

The :class:`~dilaserve.control.controller.ThresholdController` runs it on every arrival; it
prices the work in flight (:func:`~dilaserve.control.cost_model.request_load`), sizes the
cluster's throughput at the mix of steps that work runs, and hands both to the named load
control (:mod:`dilaserve.control.policies.load_control`), with the recent arrivals as its
outlook where the piece asks for one.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from dilaserve.control.capacity_price import Deadlines
from dilaserve.control.config import ControlConfig
from dilaserve.control.cost_model import CapacityModel, RequestShape, request_load
from dilaserve.control.policies import LoadControl, Outlook
from dilaserve.control.predictions import PredictionCache
from dilaserve.control.request import TrackedRequest
from dilaserve.control.step_law import StepLaw
from dilaserve.profile.types import LatencyProfile


class LoadPass:
    """Args:
    config: candidate thresholds and control settings.
    profile: step latency per TP degree.
    load_control: the named piece that turns loads and capacity into caps.
    capacity: the memoised per-instance throughput.
    accuracy: accuracy per candidate (ascending), or None without a threshold-quality table.
    """

    def __init__(
        self,
        config: ControlConfig,
        profile: LatencyProfile,
        load_control: LoadControl,
        capacity: CapacityModel,
        accuracy: np.ndarray | None,
    ):
        self.config = config
        self.profile = profile
        self.thresholds = np.array(config.thresholds)
        self.load_control = load_control
        self.capacity = capacity
        self.accuracy = accuracy
        #: ``(arrival, load row, allowed row, SLO)`` of the requests admitted over the last
        #: SLO horizon, oldest first: the outlook's estimate of the work arriving next.
        self._arrivals: deque[tuple[float, np.ndarray, np.ndarray, float]] = deque()
        #: The cluster's throughput (token-steps/s) at the last pass.
        self.throughput = 0.0

    def run(self, reqs: Sequence[TrackedRequest], instances: Sequence[tuple[int, int]], now: float) -> None:
        """Cap every request's highest threshold so the worst-case load fits the cluster.

        ``instances`` lists ``(tp, max_batch_tokens)`` of the instances accepting work.
        Capacity is the cluster's throughput times the latest SLO time left in flight
        (with one SLO for all, the newest request's full SLO, as in the paper).
        """
        if not reqs:
            return
        order = sorted(reqs, key=TrackedRequest.sort_key)
        shape = RequestShape.of(order)
        load = request_load(PredictionCache.steps_left(order), shape)
        allowed = np.array([r.allowed for r in order])  # np.array: a third of np.stack's cost
        # The latest SLO time left: max(deadline - now) is max(deadline) - now exactly, as
        # rounding is monotone.
        horizon = max(0.0, max([r.deadline for r in order]) - now)
        split = None
        if shape.use_cache.mean() >= 0.5:
            # statistics.median: np.median's value (whole block lengths) at a fraction of its cost.
            block = int(statistics.median(shape.block_length.tolist()))
            # Priced at the lowest threshold still allowed in flight: the promise load control
            # keeps is that the load fits when later requests fall back to their lowest
            # threshold, so capacity is that mix's (the most recompute steps per token). The
            # mean request is rounded so the memoised capacity is reused between events.
            law = self.config.step_law or StepLaw.one_token_per_step(block, shape.block_causal)
            tokens = int(round(shape.tokens.mean() / 16) * 16) or 16
            gen = max(block, round(statistics.fmean(r.state.gen_length for r in order) / block) * block)
            split = law.split(self.thresholds[int(np.argmax(allowed.any(axis=0)))], max(tokens - gen, 0), gen)
        throughput = sum(self.capacity.throughput(tp, mb, split) for tp, mb in instances if self.profile.has(tp))
        self.throughput = throughput
        outlook = self._outlook(order, load, allowed, now, horizon) if self.load_control.needs_outlook else None
        if outlook is not None:
            # The per-deadline check: each request's time left, against the throughput.
            left = np.array([r.deadline for r in order]) - now
            slos = np.array([a[3] for a in self._arrivals])
            outlook = replace(outlook, deadlines=Deadlines(left, throughput, slos, horizon))
        caps = self.load_control.caps(load, allowed, throughput * horizon, outlook)
        for r, c in zip(order, caps.tolist()):
            r.cap_index = c

    def _outlook(
        self, order: Sequence[TrackedRequest], load: np.ndarray, allowed: np.ndarray, now: float, horizon: float
    ) -> Outlook | None:
        """Record the requests load control sees for the first time (each arrival triggers
        it, so that is on arrival, with the work it brings) and drop those older than the
        horizon; the rest are the outlook's expected arrivals over the next horizon."""
        for i, r in enumerate(order):
            if not r.in_outlook:
                r.in_outlook = True
                self._arrivals.append((r.arrival, load[i].copy(), allowed[i].copy(), r.slo))
        while self._arrivals and self._arrivals[0][0] <= now - horizon:
            self._arrivals.popleft()
        if self.accuracy is None:
            return None
        t = len(self.thresholds)
        if not self._arrivals:
            return Outlook(self.accuracy, np.zeros((0, t)), np.zeros((0, t), dtype=bool))
        return Outlook(
            self.accuracy,
            np.array([a[1] for a in self._arrivals]),
            np.array([a[2] for a in self._arrivals]),
        )
