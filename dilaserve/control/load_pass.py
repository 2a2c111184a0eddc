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
        #: The requests admitted over the last SLO horizon, oldest first (their arrival,
        #: load row, allowed row and SLO): the outlook's estimate of the work arriving next.
        self._arrivals = _Recent(len(config.thresholds))
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
        if (allowed.sum(axis=1) == 1).all():
            # Every request is pinned to one threshold (a static operating point): every
            # load control caps a row at its only allowed index, and the pass is a tuned
            # run's most-run code, its replays' above all. The outlook above still records
            # the arrivals, for the passes after a tier goes adaptive.
            caps = np.argmax(allowed, axis=1)
        else:
            if outlook is not None:
                # The per-deadline check: each request's time left, against the throughput.
                left = np.array([r.deadline for r in order]) - now
                outlook = replace(outlook, deadlines=Deadlines(left, throughput, self._arrivals.slo, horizon))
            caps = self.load_control.caps(load, allowed, throughput * horizon, outlook)
        for r, c in zip(order, caps.tolist()):
            r.cap_index = c

    def _outlook(
        self, order: Sequence[TrackedRequest], load: np.ndarray, allowed: np.ndarray, now: float, horizon: float
    ) -> Outlook | None:
        """Record the requests load control sees for the first time (each arrival triggers
        it, so that is on arrival, with the work it brings) and drop those older than the
        horizon; the rest are the outlook's expected arrivals over the next horizon."""
        recent = self._arrivals
        for i, r in enumerate(order):
            if not r.in_outlook:
                r.in_outlook = True
                recent.append(r.arrival, load[i], allowed[i], r.slo)
        recent.drop_before(now - horizon)
        if self.accuracy is None:
            return None
        return Outlook(self.accuracy, recent.load, recent.allowed)


class _Recent:
    """The outlook's arrivals as arrays kept up to date in place: rows join at the end and
    leave from the front, and the arrays load control reads are read-only views, not a
    stack of every row rebuilt on every pass (the pass runs on every arrival)."""

    def __init__(self, thresholds: int, capacity: int = 256):
        self._arrival = np.zeros(capacity)
        self._slo = np.zeros(capacity)
        self._load = np.zeros((capacity, thresholds))
        self._allowed = np.zeros((capacity, thresholds), dtype=bool)
        self._start = self._end = 0

    def __len__(self) -> int:
        return self._end - self._start

    def append(self, arrival: float, load: np.ndarray, allowed: np.ndarray, slo: float) -> None:
        if self._end == len(self._arrival):
            self._make_room()
        e = self._end
        self._arrival[e], self._load[e], self._allowed[e], self._slo[e] = arrival, load, allowed, slo
        self._end += 1

    def drop_before(self, time: float) -> None:
        """Drop the rows that arrived at or before ``time`` (oldest first, as they came)."""
        while self._start < self._end and self._arrival[self._start] <= time:
            self._start += 1

    def _make_room(self) -> None:
        """Move the live rows to the front, and double the arrays where that is not enough."""
        n, cap = len(self), len(self._arrival)
        size = cap * 2 if n > cap // 2 else cap
        for name in ("_arrival", "_slo", "_load", "_allowed"):
            old = getattr(self, name)
            new = np.zeros((size, *old.shape[1:]), dtype=old.dtype)
            new[:n] = old[self._start : self._end]
            setattr(self, name, new)
        self._start, self._end = 0, n

    def _view(self, a: np.ndarray) -> np.ndarray:
        v = a[self._start : self._end]
        v.flags.writeable = False
        return v

    @property
    def load(self) -> np.ndarray:
        return self._view(self._load)

    @property
    def allowed(self) -> np.ndarray:
        return self._view(self._allowed)

    @property
    def slo(self) -> np.ndarray:
        return self._view(self._slo)
