"""Where the scheduler places requests (docs/architecture.md section 8): arrivals (by slack
or by the dispatch's choice), the admission check on the chosen slot, the instance filters,
deferral, and the deferred requests placed once room frees up; then the thresholds of
the requests placed (the controller's load control and selection).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from dilaserve.control.controller import ThresholdController
from dilaserve.control.policies.admission import QueueAhead
from dilaserve.control.request import TrackedRequest
from dilaserve.schedule.config import SchedulerConfig
from dilaserve.schedule.pool import InstancePool


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

    # ============================================================ placement
    def _mask(self, req: TrackedRequest) -> np.ndarray:
        mask = self.filters[0].mask(req, self.pool)
        for f in self.filters[1:]:
            mask = mask & f.mask(req, self.pool)
        return mask

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

    def _place_deferred(self, touched: set[int], placed: list[TrackedRequest]) -> None:
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
        instances = [(int(self.pool.tp[s]), int(self.pool.max_batch[s])) for s in acc]
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
