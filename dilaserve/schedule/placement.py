"""Where the scheduler places requests (docs/architecture.md section 8): arrivals (by slack
or by the dispatch's choice), the admission check on the chosen slot, the instance filters,
deferral, and the deferred requests placed once room frees up; then the thresholds of
the requests placed (the controller's load control and selection).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from dilaserve.control.controller import ThresholdController
from dilaserve.control.policies.admission import QueueAhead
from dilaserve.control.request import TrackedRequest
from dilaserve.control.step_time import StepTimeCalibration
from dilaserve.engine.state import StepKind
from dilaserve.profile.types import StepCurve
from dilaserve.schedule.config import SchedulerConfig
from dilaserve.schedule.pool import InstancePool

#: Under a step-time cap a batch grows to at most this many times its last measured
#: step's profiled time before a step of it is measured.
STEP_GROWTH = 2.0

#: Seconds of event time between rechecks of the waiting requests while the calibrated
#: profile stays as it is (``ControlConfig.recheck_queue``).
RECHECK_EVERY_S = 1.0


def tokens_within(curve: StepCurve, seconds: float, upto: int) -> int:
    """The most tokens (at most ``upto``) whose step on ``curve`` takes no more than
    ``seconds``; 0 when even one token's does (bisection: the curves rise with tokens)."""
    if curve(upto) <= seconds:
        return upto
    lo, hi = 0, upto  # curve(lo) fits (or lo == 0), curve(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if curve(mid) <= seconds:
            lo = mid
        else:
            hi = mid
    return lo


class Placement:
    """The placement part of :class:`~dilaserve.schedule.scheduler.GlobalScheduler` (a
    mixin: the scheduler owns the state named below)."""

    controller: ThresholdController
    config: SchedulerConfig
    pool: InstancePool
    requests: dict[str, TrackedRequest]
    deferred: list[TrackedRequest]
    now: float
    _last_load_control: float
    _load_dirty: bool
    #: (the profile's curves, event time) at the last recheck of the queue (None: none yet)
    _last_recheck: tuple[dict, float] | None
    #: tp -> (the calibrated curve, its max batch, the tokens a capped step holds)
    _step_caps: dict[int, tuple[StepCurve, int, int]]
    step_time: StepTimeCalibration | None

    def _place_new(self, req: TrackedRequest, mask: np.ndarray) -> int | None:
        """The slot for an arrival: with a slack-aware dispatch and an operating point that
        places by slack, the first slot of the dispatch's ranking that ``req`` fits with
        headroom; else (and for every other dispatch) the dispatch's choice."""
        if self._places_by_slack:
            for slot in self.dispatch.rank(req, self.pool, mask):
                placement, members = self._placement(slot, req), self._members(slot)
                if self.controller.fits(req, placement, self.now, members, self.config.fit_headroom):
                    return slot
        return self.dispatch.choose(req, self.pool, mask)

    @property
    def _places_by_slack(self) -> bool:
        """Arrivals go to the busiest instance they fit (the operating point asks for it and
        the dispatch and the controller can do it)."""
        return self.dispatch.fits_by_slack and self.controller.point.fit and self.controller.predicting

    def _placement(self, slot: int, req: TrackedRequest) -> tuple[int, float, int]:
        """``(tp, tokens, requests)`` of ``slot`` once ``req`` joins it."""
        pool = self.pool
        return int(pool.tp[slot]), float(pool.tokens[slot] + req.tokens), int(pool.n_reqs[slot]) + 1

    def _members(self, slot: int) -> list[TrackedRequest]:
        return [self.requests[rid] for rid in self.pool.members[slot]]

    def _admission(self, req: TrackedRequest, slot: int | None):
        """The controller's admission check for ``req`` joining ``slot`` (None: it would wait)."""
        if slot is None:
            return self.controller.check_admission(req, None, self.now, queue=self._queue_ahead(req))
        return self.controller.check_admission(req, self._placement(slot, req), self.now, self._members(slot))

    def _queue_ahead(self, req: TrackedRequest) -> QueueAhead:
        """What ``req``, finding no room, would wait behind: the accepting instances whose
        batch can hold it, with their members, and the deferred requests placed before it."""
        pool, key = self.pool, req.sort_key()
        slots = np.flatnonzero(pool.accepting & (pool.max_batch >= req.tokens))
        rooms = tuple(
            (
                (int(pool.tp[s]), float(max(pool.tokens[s], req.tokens)), max(int(pool.n_reqs[s]), 1)),
                tuple(self._members(s)),
            )
            for s in slots
        )
        ahead = sorted((d for d in self.deferred if d.sort_key() < key), key=TrackedRequest.sort_key)
        return QueueAhead(rooms, tuple(ahead))

    # ============================================================ step-time cap
    def _step_cap_tokens(self, tp: int, max_batch: int) -> int:
        """The tokens a TP-``tp`` batch may hold under ``ControlConfig.max_step_ms``: the
        most whose full-recompute step on the controller's (calibrated) profile fits it;
        recomputed when step-time calibration rescales the profile."""
        curve = self.controller.profile.curve(tp, StepKind.RECOMPUTE)
        caps = self._step_caps
        known = caps.get(tp)
        if known is None or known[0] is not curve or known[1] != max_batch:
            seconds = self.controller.config.max_step_ms / 1000.0
            known = caps[tp] = (curve, max_batch, tokens_within(curve, seconds, max_batch))
        return known[2]

    def _batch_limits(self, slots: np.ndarray) -> np.ndarray:
        """Each of ``slots``' batch limit in tokens: its ``max_batch``, lowered to the step-time
        cap where one is set."""
        pool = self.pool
        if self.controller.config.max_step_ms is None:
            return pool.max_batch[slots]
        return np.array([self._step_cap_tokens(int(pool.tp[s]), int(pool.max_batch[s])) for s in slots], dtype=float)

    def _under_step_cap(self, req: TrackedRequest) -> np.ndarray | None:
        """Slots ``req`` may join without growing a batch past the step-time cap (an empty
        one always may); None without a cap.

        Two rules stand beside the calibrated profile's, because a burst's arrivals are
        all placed before its first step finishes, and that step is slower than any the
        factors were learned on (the server's own front end is busy with the burst): a
        batch whose last step took longer than the cap is not grown, and a batch is not
        grown past :data:`STEP_GROWTH` times its last measured step's profiled time, so
        it reaches its cap over a few measured steps instead of in one unmeasured jump."""
        cap_ms = self.controller.config.max_step_ms
        if cap_ms is None:
            return None
        pool = self.pool
        acc = np.flatnonzero(pool.accepting)  # the others have no room anyway (or no curve)
        limits = np.zeros(len(pool.tp))
        limits[acc] = self._batch_limits(acc)
        if self.step_time is not None:
            base, last = self.step_time.base, self.step_time.last_step
            for s in acc:
                took = last.get(pool.ids[s])
                if took is None:
                    continue
                if took[0] * 1000.0 > cap_ms:
                    limits[s] = 0.0
                else:
                    curve = base.curve(int(pool.tp[s]), StepKind.RECOMPUTE)
                    grown = tokens_within(curve, STEP_GROWTH * took[1], int(limits[s]))
                    limits[s] = min(limits[s], grown)
        return (pool.n_reqs == 0) | (pool.tokens + req.tokens <= limits)

    # ============================================================ placement
    def _mask(self, req: TrackedRequest) -> np.ndarray:
        mask = self.filters[0].mask(req, self.pool)
        for f in self.filters[1:]:
            mask = mask & f.mask(req, self.pool)
        capped = self._under_step_cap(req)
        return mask if capped is None else mask & capped

    def _assign(self, req: TrackedRequest, slot: int, touched: set[int], placed: list[TrackedRequest]) -> None:
        self.pool.assign(slot, req.request_id, req.tokens)
        req.instance = self.pool.ids[slot]
        touched.add(slot)
        placed.append(req)

    def _defer(self, req: TrackedRequest) -> None:
        if not len(self.pool):
            self._warn("empty", "no instances in the cluster: deferring request %s until one is ready", req.request_id)
        else:
            self._warn(
                "defer", "no instance has room for request %s (%d tokens): deferring it", req.request_id, req.tokens
            )
        self.deferred.append(req)

    def _recheck_queue(self) -> None:
        """``ControlConfig.recheck_queue``: refuse the waiting requests that the steps
        measured since they were admitted now predict will miss their SLO (each priced
        behind the rooms and the waiting requests kept ahead of it, as at admission).

        Each was admitted on the profile in force then, so the check runs when step-time
        calibration has rescaled it since, and otherwise at most every
        :data:`RECHECK_EVERY_S` of event time (the requests ahead progress as predicted or
        not): with 300 waiting it costs about 0.1 s of the step loop."""
        ctl = self.controller
        if not (ctl.config.recheck_queue and ctl.admission_on and self.deferred):
            return
        curves = ctl.profile.recompute  # replaced whole when the profile is rescaled
        last = self._last_recheck
        if last is not None and last[0] is curves and self.now - last[1] < RECHECK_EVERY_S:
            return
        self._last_recheck = (curves, self.now)
        self.deferred.sort(key=TrackedRequest.sort_key)
        kept: list[TrackedRequest] = []
        for req in self.deferred:
            queued = ctl.queued_finish_s(req, QueueAhead(self._queue_ahead(req).rooms, tuple(kept)))
            left = req.slo_left(self.now)
            if queued is None or queued[0] <= left or req.state.steps_done:  # one that ran is not refused
                kept.append(req)
                continue
            del self.requests[req.request_id]
            self._load_dirty = True
            self._reject(
                req,
                f"refused while waiting for room: the steps measured since it was admitted predict "
                f"{queued[0]:.2f} s, {max(left, 0.0):.2f} s left",
                float(max(1, math.ceil(queued[0] - max(left, 0.0)))),
            )
        self.deferred = kept

    def _place_deferred(self, touched: set[int], placed: list[TrackedRequest]) -> None:
        self._recheck_queue()
        if not self.deferred:
            return
        room = self.pool.max_room()
        if room <= 0:
            return
        self.deferred.sort(key=TrackedRequest.sort_key)
        still: list[TrackedRequest] = []
        for req in self.deferred:
            slot = None
            if req.tokens <= room:
                slot = self.dispatch.choose(req, self.pool, self._mask(req))
            if slot is None:
                still.append(req)
                continue
            self._assign(req, slot, touched, placed)
            room = self.pool.max_room()
        self.deferred = still

    # ============================================================ thresholds
    def _maybe_control_load(self) -> None:
        if not self.controller.load_control_on:
            return
        interval = self.controller.config.load_control_interval_s
        if not self._load_dirty and self.now - self._last_load_control < interval:
            return
        acc = np.flatnonzero(self.pool.accepting)
        instances = [(int(self.pool.tp[s]), int(m)) for s, m in zip(acc, self._batch_limits(acc))]
        self.controller.control_load(list(self.requests.values()), instances, self.now)
        self._last_load_control, self._load_dirty = self.now, False

    def _select(self, placed: Sequence[TrackedRequest]) -> None:
        by_slot: dict[int, list[TrackedRequest]] = defaultdict(list)
        for req in placed:
            if req.instance is not None:
                by_slot[self.pool.slot_of[req.instance]].append(req)
        for s, reqs in by_slot.items():
            self.controller.select(
                reqs, int(self.pool.tp[s]), float(self.pool.tokens[s]), int(self.pool.n_reqs[s]), self.now
            )
