"""The threshold controller: admission, predictions, load control and threshold selection.

Fixed-threshold policies (the baselines) use the same object with ``slo_aware=False``:
every request then runs at ``ControlConfig.fixed_threshold`` and no predictor is called.
"""
from __future__ import annotations

import logging
import statistics
from functools import partial
from typing import Optional, Sequence

import numpy as np

from dilaserve.control.config import ControlConfig
from dilaserve.control.load import CacheStepLatency, CapacityModel, RequestShape, request_load, split_cost_one
from dilaserve.control.load_control import cap_thresholds
from dilaserve.control.predictions import PredictionCache
from dilaserve.control.request import TrackedRequest
from dilaserve.control.thresholds import pick_threshold
from dilaserve.engine.state import StepKind
from dilaserve.predict.base import StepPredictor
from dilaserve.profile.types import LatencyProfile

log = logging.getLogger(__name__)


class ThresholdController:
    def __init__(
        self,
        config: ControlConfig,
        profile: LatencyProfile,
        predictor: Optional[StepPredictor] = None,
        *,
        slo_aware: bool = True,
        load_control: bool = True,
        refresh_every_steps: Optional[int] = None,
    ):
        if slo_aware and predictor is None:
            raise ValueError(
                "an SLO-aware threshold controller needs a StepPredictor: pass one, or use a "
                "fixed-threshold policy (slo_aware=False)"
            )
        self.config = config
        self.profile = profile
        self.slo_aware = slo_aware
        self.load_control_on = slo_aware and load_control
        self.thresholds = np.array(config.thresholds)
        self.fixed_index = config.index_of(config.fixed_threshold)
        self.capacity = CapacityModel(profile, config.capacity_batch_grid)
        self.cache_step = CacheStepLatency(profile)
        self.predictions = (
            PredictionCache(predictor, config.thresholds, refresh_every_steps or config.refresh_every_steps)
            if predictor is not None else None
        )

    # ---------------------------------------------------------------- admission
    def admit(self, req: TrackedRequest, now: float) -> None:
        """Set the allowed thresholds of a new request and predict its steps."""
        t = len(self.thresholds)
        allowed = self.thresholds >= req.min_threshold - 1e-12
        if not allowed.any():
            log.warning(
                "request %s: quality floor %.3f is above every candidate threshold %s; "
                "using the highest candidate", req.request_id, req.min_threshold, self.config.thresholds,
            )
            allowed[-1] = True
        if req.slo_left(now) <= 0:
            # Nothing can meet the SLO any more: finish as fast as possible rather than drop.
            req.late_on_arrival = True
            lo = int(np.argmax(allowed))
            allowed = np.zeros(t, dtype=bool)
            allowed[lo] = True
            log.warning(
                "request %s arrived %.3fs past its deadline; serving best-effort at threshold %.2f",
                req.request_id, now - req.deadline, self.thresholds[lo],
            )
        req.allowed = allowed
        req.cap_index = t - 1 - int(np.argmax(allowed[::-1]))
        if not self.slo_aware:
            req.threshold_index = self.fixed_index if allowed[self.fixed_index] else req.cap_index
            return
        req.threshold_index = req.cap_index
        self.predictions.refresh([req])

    def refresh(self, reqs: Sequence[TrackedRequest]) -> int:
        """Re-predict the requests whose refresh is due (one batched call)."""
        if self.predictions is None or not self.slo_aware:
            return 0
        return self.predictions.refresh_due(reqs)

    # ------------------------------------------------------------ load control
    def control_load(self, reqs: Sequence[TrackedRequest], instances: Sequence[tuple[int, int]], now: float) -> None:
        """Cap every request's highest threshold so the worst-case load fits the cluster.

        ``instances`` lists ``(tp, max_batch_tokens)`` of the instances accepting work.
        Capacity is the cluster's throughput times the latest SLO time left in flight
        (with one SLO for all, the newest request's full SLO, as in the paper).
        """
        if not self.load_control_on or not reqs:
            return
        order = sorted(reqs, key=TrackedRequest.sort_key)
        shape = RequestShape.of(order)
        load = request_load(PredictionCache.steps_left(order), shape)
        allowed = np.array([r.allowed for r in order])  # np.array: a third of np.stack's cost
        # The latest SLO time left: max(deadline - now) is max(deadline) - now exactly, as
        # rounding is monotone.
        horizon = max(0.0, max([r.deadline for r in order]) - now)
        cache, spb = None, None
        if shape.use_cache.mean() >= 0.5:
            # statistics.median: np.median's value (whole block lengths) at a fraction of its cost.
            block = int(statistics.median(shape.block_length.tolist()))
            cache = (block, int(round(shape.tokens.mean() / 16) * 16) or 16)
            # Priced at the lowest threshold still allowed in flight: the promise load control
            # keeps is that the load fits when later requests fall back to their lowest
            # threshold, so capacity is that mix's (the most recompute steps per token).
            law = self.config.step_law
            spb = law.steps(self.thresholds[int(np.argmax(allowed.any(axis=0)))]) if law else None
        throughput = sum(self.capacity.throughput(tp, mb, cache, spb) for tp, mb in instances if self.profile.has(tp))
        caps = cap_thresholds(load, allowed, throughput * horizon)
        for r, c in zip(order, caps.tolist()):
            r.cap_index = c

    # -------------------------------------------------------------- selection
    def select(self, reqs: Sequence[TrackedRequest], tp: int, inst_tokens: float, inst_requests: int, now: float) -> None:
        """Pick thresholds for requests placed on one TP-``tp`` instance."""
        if not reqs:
            return
        if not self.slo_aware:
            for r in reqs:
                if r.allowed[self.fixed_index]:
                    r.threshold_index = self.fixed_index
            return
        # Request by request in plain Python (a stepped batch holds a few requests), and
        # only at the thresholds the walk visits; the numbers are those of steps_left,
        # remaining_time and walk_thresholds, bit for bit.
        lp_recompute = self.profile.latency(tp, inst_tokens, StepKind.RECOMPUTE)
        batch = max(inst_requests, 1)
        for r in reqs:
            st = r.state
            if st.use_cache:
                # Cache steps feed one block per request of the batch: LP_cache[B x n_reqs].
                lp_cache = self.cache_step(tp, float(st.block_length) * batch)
                remaining = partial(_remaining_s, r, st.recompute_left_lower_bound, True, lp_cache, lp_recompute)
            else:
                remaining = partial(_remaining_s, r, 0, False, 0.0, lp_recompute)
            r.threshold_index = pick_threshold(r.allowed, r.cap_index, remaining, r.slo_left(now))

    def threshold(self, req: TrackedRequest) -> float:
        return float(self.thresholds[req.threshold_index])


def _remaining_s(req: TrackedRequest, recompute_left: int, use_cache: bool,
                 lp_cache: float, lp_recompute: float, j: int) -> float:
    """Remaining seconds of ``req`` at threshold index ``j``: its steps left, priced as
    :func:`~dilaserve.control.load.remaining_time` prices them."""
    return split_cost_one(PredictionCache.steps_left_at(req, j), recompute_left, use_cache, lp_cache, lp_recompute)
