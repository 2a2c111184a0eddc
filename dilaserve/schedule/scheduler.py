"""The event-driven global scheduler (docs/architecture.md section 1, dataflow; its policy pieces: section 8).

On every event it (1) places each unscheduled or just-stepped request on an instance
(dispatch for new or deferred requests, migration for just-stepped ones, at legal
migration points only), (2) defers requests no instance has room for, (3) re-selects the
thresholds of the requests it placed or moved, and (4) submits a step to every idle
instance that holds requests. The same object serves real and simulated clusters; it only
talks to the :class:`~dilaserve.cluster.base.Backend` interface.

This module handles the events and submits the steps; its concerns live beside it:
placement and thresholds (:mod:`~dilaserve.schedule.placement`), migration
(:mod:`~dilaserve.schedule.moves`) and plan driving (:mod:`~dilaserve.schedule.plans`).
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np

from dilaserve.cluster.base import (
    Backend,
    InstanceFailed,
    InstanceReady,
    InstanceSpec,
    InstanceStopped,
    StepAssignment,
    StepFinished,
)
from dilaserve.cluster.step_cost import batch_pass_tokens
from dilaserve.control.controller import ThresholdController
from dilaserve.control.request import TrackedRequest
from dilaserve.control.step_time import StepTimeCalibration
from dilaserve.engine.state import StepKind
from dilaserve.profile.types import LatencyProfile
from dilaserve.reconfig.executor import PlanExecutor
from dilaserve.reconfig.reconfigurator import Reconfigurator
from dilaserve.schedule.config import SchedulerConfig
from dilaserve.schedule.dispatch import dispatch_policies
from dilaserve.schedule.events import Event, ReconfigTick, RequestArrived, RequestOutcome
from dilaserve.schedule.filters import instance_filters
from dilaserve.schedule.migration import migration_policies
from dilaserve.schedule.migration_points import migration_points
from dilaserve.schedule.moves import Moves
from dilaserve.schedule.observer import SchedulerObserver
from dilaserve.schedule.placement import Placement
from dilaserve.schedule.plans import PlanDriver
from dilaserve.schedule.policies import SchedulerPolicy
from dilaserve.schedule.pool import InstancePool
from dilaserve.schedule.tuner import OperatingPointTuner

log = logging.getLogger(__name__)

#: The latest outcomes kept in ``GlobalScheduler.outcomes`` (for tests and inspection): a
#: long-lived server must not keep every one; the observer's ``on_outcome`` sees them all.
OUTCOME_HISTORY = 10_000


def replacement_spec(failed: InstanceSpec, n: int) -> InstanceSpec:
    """The instance launched in place of ``failed``: its TP degree, node, GPUs and batch
    limit, under the id ``<first instance's id>~<n>`` (a replacement that fails again is
    replaced under its first predecessor's name, not a growing chain)."""
    root = failed.instance_id.split("~", 1)[0]
    return replace(failed, instance_id=f"{root}~{n}")


class GlobalScheduler(Placement, Moves, PlanDriver):
    """Args (built by :func:`~dilaserve.schedule.control_plane.build_control_plane`, which
    also binds the scheduler to the backend's events):
    backend: the instances (:class:`~dilaserve.cluster.base.Backend`).
    profile: step latency per TP degree.
    policy: names the scheduler's own pieces (dispatch, migration, migration point, filters).
    controller: the threshold controller the policy names.
    config: settings that are not part of a policy.
    reconfigurator: re-plans the cluster on reconfiguration ticks (None: a static cluster).
    tuner: moves the controller's operating point online (None: it stays where it is).
    observer: told of steps, outcomes, migrations, plans, instance changes and failures.
    step_time: learns the instances' step time against the controller's profile, from the
        steps they finish (None: the profile is trusted as measured).
    """

    def __init__(
        self,
        backend: Backend,
        profile: LatencyProfile,
        policy: SchedulerPolicy,
        controller: ThresholdController,
        *,
        config: SchedulerConfig = SchedulerConfig(),
        reconfigurator: Reconfigurator | None = None,
        tuner: OperatingPointTuner | None = None,
        observer: SchedulerObserver | None = None,
        step_time: StepTimeCalibration | None = None,
    ):
        self.policy = policy
        self.backend, self.profile, self.config = backend, profile, config
        self.controller = controller
        self.dispatch = dispatch_policies.get(policy.dispatch)(profile)
        self.migration = migration_policies.get(policy.migration)(profile)
        self.migration_point = migration_points.get(policy.migration_point)()
        self.filters = [instance_filters.get(f)() for f in policy.filters]
        self.reconfigurator = reconfigurator
        self.tuner = tuner
        self.observer = observer or SchedulerObserver()
        self.step_time = step_time
        #: instance -> the profile's (recompute, cache) seconds for its step in flight
        self._step_expected: dict[str, tuple[float, float]] = {}
        #: Replace instances that die (``config.replace_failed_instances``); a server that is
        #: shutting down turns it off.
        self.replace_failed = config.replace_failed_instances

        self.pool = InstancePool()
        self.requests: dict[str, TrackedRequest] = {}
        self.deferred: list[TrackedRequest] = []
        self.outcomes: deque[RequestOutcome] = deque(maxlen=OUTCOME_HISTORY)
        self.executor: PlanExecutor | None = None
        #: The layout the cluster started with (set by the first :meth:`start`).
        self._home: list[InstanceSpec] | None = None
        self.now = 0.0
        self.migrations = 0
        self._last_load_control = -np.inf
        self._load_dirty = False
        self._step_caps: dict[int, tuple] = {}
        self._last_recheck: tuple[dict, float] | None = None
        self._last_warn: dict[str, float] = {}
        self._queue: list[Event] = []
        self._handling = False
        self._max_batch_seen = 0
        self._cancelled: set[str] = set()
        self._replacements = itertools.count(1)

    # ================================================================ public
    def start(self, instances: Iterable[InstanceSpec]) -> None:
        """Launch the initial instances (e.g. a static all-TP-1 cluster); the first ones
        launched are the layout the tuner may return to."""
        instances = list(instances)
        if self._home is None:
            self._home = instances
        for spec in instances:
            self._launch(spec)

    def handle(self, event: Event) -> None:
        """Process one event, then any the backend raised while it was handled."""
        self._queue.append(event)
        if self._handling:
            return  # re-entrant call from a synchronous backend: queued
        self._handling = True
        try:
            while self._queue:
                self._dispatch_event(self._queue.pop(0))
        finally:
            self._handling = False

    def cancel(self, request_id: str, reason: str = "cancelled by the client") -> bool:
        """Withdraw a request (e.g. its client disconnected) and free its batch slot.

        A step already in flight for it still completes on the instance; its result is
        dropped quietly. Returns False for a request that is not in flight.
        """
        req = self.requests.pop(request_id, None)
        if req is None:
            return False
        if req in self.deferred:
            self.deferred.remove(req)
        slot = self.pool.slot_of.get(req.instance) if req.instance is not None else None
        if slot is not None:
            self.pool.unassign(slot, request_id, req.tokens)
            self.backend.release(req.instance, [request_id])
        self._cancelled.add(request_id)
        self._load_dirty = True
        self._emit(RequestOutcome(request_id, "cancelled", req.arrival, req.deadline, self.now, reason=reason))
        return True

    @property
    def in_flight(self) -> int:
        return len(self.requests)

    # ========================================================= event handlers
    def _dispatch_event(self, ev: Event) -> None:
        self.now = max(self.now, ev.time)
        self._collect_control()
        touched: set[int] = set()
        placed: list[TrackedRequest] = []
        if isinstance(ev, StepFinished):
            self.observer.on_step(ev)
            self._on_step(ev, touched, placed)
        elif isinstance(ev, RequestArrived):
            self._on_arrival(ev.request, touched, placed)
        elif isinstance(ev, InstanceReady):
            self._on_ready(ev.instance_id, touched)
        elif isinstance(ev, InstanceStopped):
            self._on_stopped(ev.instance_id)
        elif isinstance(ev, InstanceFailed):
            self._on_failed(ev)
        elif isinstance(ev, ReconfigTick):
            self._on_tick()
        else:
            log.error("scheduler: ignoring unknown event %r", ev)
            return
        self._place_deferred(touched, placed)
        self._maybe_control_load()
        self._select(placed)
        self._advance_plan()
        for s in touched:
            self._kick(s)

    def _adopt_tuning(self, tune) -> None:
        """Run the point ``tune()`` returns (None: keep the current one); after a tuning,
        perhaps change the layout (:meth:`_after_tuning`)."""
        tunings = len(self.tuner.records)
        point = tune()
        if point is not None:
            self.controller.set_point(point)
        if len(self.tuner.records) > tunings:
            self._after_tuning()

    def _collect_control(self) -> None:
        """Adopt what the control worker finished since the last event (between steps, in
        a server; the simulator's inline worker never has anything out)."""
        if self.tuner is not None and self.tuner.pending:
            tuner = self.tuner
            self._adopt_tuning(lambda: tuner.collect(self.now, self.controller.point))

    def _on_arrival(self, req: TrackedRequest, touched: set[int], placed: list[TrackedRequest]) -> None:
        limit = self._request_limit()
        if limit is not None and req.tokens > limit:
            log.warning(
                "request %s rejected: %d tokens exceed the largest instance batch (%d tokens)",
                req.request_id,
                req.tokens,
                limit,
            )
            self._reject(req, f"needs {req.tokens} tokens > batch limit {limit}")
            return
        if self.tuner is not None:
            self.tuner.observe(req, self.now)
            tuner = self.tuner
            self._adopt_tuning(lambda: tuner.maybe_tune(self.now, self.pool.active_specs(), self.controller.point))
        self.controller.prepare_arrival(req, self.now)
        if self.reconfigurator is not None:
            # Refused requests are demand too: the planner sizes the cluster for them.
            self.reconfigurator.observe(req, self.now)
        slot = self._place_new(req, self._mask(req))
        refusal = self._admission(req, slot) if self.controller.admission_on else None
        if refusal is not None:
            self._warn("admission", "request %s refused: %s", req.request_id, refusal.reason)
            self._reject(req, refusal.reason, refusal.retry_after_s)
            return
        self.requests[req.request_id] = req
        self._load_dirty = True
        if slot is None:
            self._defer(req)
        else:
            self._assign(req, slot, touched, placed)

    def _on_step(self, ev: StepFinished, touched: set[int], placed: list[TrackedRequest]) -> None:
        src = self.pool.slot_of.get(ev.instance_id)
        if src is None:
            log.error("step finished on unknown instance %s; ignoring it", ev.instance_id)
            return
        self.pool.busy[src] = False
        touched.add(src)
        expected = self._step_expected.pop(ev.instance_id, None)
        if expected is not None and ev.duration_s is not None:
            self._learn_step_time(ev.instance_id, int(self.pool.tp[src]), expected, ev.duration_s)
        stepped: list[TrackedRequest] = []
        for st in ev.states:
            req = self.requests.get(st.request_id)
            if req is None and st.request_id in self._cancelled:
                self._cancelled.discard(st.request_id)  # its last step ran after the cancel
                continue
            if req is None:
                log.error("instance %s stepped unknown request %s; ignoring it", ev.instance_id, st.request_id)
                continue
            req.update_state(st)
            if st.finished:
                self._finish(req, src)
            else:
                stepped.append(req)
        self.controller.refresh(stepped)
        for req in stepped:
            self._decide_migration(req, src, touched)
        placed.extend(stepped)

    def _on_ready(self, instance_id: str, touched: set[int]) -> None:
        slot = self.pool.slot_of.get(instance_id)
        if slot is None:
            log.error("unknown instance %s reported ready; ignoring it", instance_id)
            return
        self.pool.set_ready(slot)
        touched.add(slot)
        self.observer.on_instance(instance_id, True)
        if self.executor is not None:
            self.executor.on_ready(instance_id)

    def _on_stopped(self, instance_id: str) -> None:
        slot = self.pool.slot_of.get(instance_id)
        if self.executor is not None:
            self.executor.on_stopped(instance_id)
        if slot is None:
            return
        removed = self.pool.remove(slot)
        self._forget_steps(instance_id)
        self.observer.on_instance(instance_id, False)
        if removed:
            # Only drained instances are stopped; anything left is re-queued, never dropped.
            log.warning("instance %s stopped holding requests %s; re-queueing them", instance_id, removed)
            self._requeue(removed)

    def _on_failed(self, ev: InstanceFailed) -> None:
        """Re-queue a dead instance's requests and, unless told not to, launch a replacement
        on its GPUs. Its step in flight is lost, so each request goes on elsewhere from the
        state of its last finished step (a real instance's states come back only with a
        finished step; a simulated one applies a step only when it finishes)."""
        iid = ev.instance_id
        slot = self.pool.slot_of.get(iid)
        if slot is None:
            log.warning("unknown instance %s failed (%s); ignoring it", iid, ev.reason)
            return
        planned = self.executor is not None and not self.executor.done and iid in self.executor.plan.stops
        removed = self.pool.remove(slot)
        self._forget_steps(iid)
        log.warning("instance %s failed (%s): re-queueing its %d request(s)", iid, ev.reason, len(removed))
        self._requeue(removed)
        replacement = None
        if self.replace_failed and not planned:
            replacement = replacement_spec(ev.spec, next(self._replacements))
        if self.executor is not None:
            self.executor.on_failed(iid, replacement.instance_id if replacement else None)
        self.observer.on_instance(iid, False)
        self.observer.on_failure(ev, len(removed), replacement.instance_id if replacement else None)
        if replacement is not None:
            log.warning(
                "replacing failed instance %s with %s (TP-%d on node %d, GPUs %s)",
                iid,
                replacement.instance_id,
                replacement.tp,
                replacement.node,
                replacement.gpus,
            )
            self._launch(replacement)

    def _requeue(self, request_ids: Sequence[str]) -> None:
        """Defer requests whose instance is gone (the caller logged why); the placement at
        the end of this event puts them wherever there is room."""
        for rid in request_ids:
            req = self.requests[rid]
            req.instance = None
            self.deferred.append(req)

    # ============================================================ execution
    def _kick(self, slot: int) -> None:
        pool = self.pool
        if not (pool.active[slot] and pool.ready[slot]) or pool.busy[slot] or not pool.members[slot]:
            return
        thr = self.controller.config.thresholds  # plain floats, the candidates ascending
        members = [self.requests[rid] for rid in pool.members[slot]]
        if self.policy.deadline_batching and len(members) > 1:
            members = self.controller.step_members(members, int(pool.tp[slot]), self.now)
        batch = [StepAssignment(r.state, thr[r.threshold_index]) for r in members]
        if self.step_time is not None:
            self._step_expected[pool.ids[slot]] = self.step_time.expected(int(pool.tp[slot]), *batch_pass_tokens(batch))
        pool.busy[slot] = True
        self.backend.submit_step(pool.ids[slot], batch)

    def _forget_steps(self, instance_id: str) -> None:
        self._step_expected.pop(instance_id, None)
        if self.step_time is not None:
            self.step_time.forget(instance_id)

    def _learn_step_time(self, instance_id: str, tp: int, expected: tuple[float, float], took_s: float) -> None:
        if self.step_time.observe(instance_id, tp, expected, took_s, self.now):
            self.controller.profile_changed()
            log.info(
                "step time on TP-%d: %.2fx the profile for recompute steps, %.2fx for cache steps",
                tp,
                self.step_time.factor(tp, StepKind.RECOMPUTE),
                self.step_time.factor(tp, StepKind.CACHE),
            )

    def _finish(self, req: TrackedRequest, slot: int) -> None:
        self.pool.unassign(slot, req.request_id, req.tokens)
        req.finish_time = self.now
        self.controller.on_finish(req)
        del self.requests[req.request_id]
        self._load_dirty = True
        self._emit(
            RequestOutcome(
                req.request_id, "finished", req.arrival, req.deadline, self.now, late_on_arrival=req.late_on_arrival
            )
        )

    def _emit(self, outcome: RequestOutcome) -> None:
        self.outcomes.append(outcome)
        self.observer.on_outcome(outcome)

    def _reject(self, req: TrackedRequest, reason: str, retry_after_s: float | None = None) -> None:
        """Answer ``req`` as rejected (it never ran), with why and when to retry."""
        self._emit(
            RequestOutcome(
                req.request_id,
                "rejected",
                req.arrival,
                req.deadline,
                self.now,
                reason=reason,
                retry_after_s=retry_after_s,
            )
        )

    # ======================================================= reconfiguration
    def _launch(self, spec: InstanceSpec) -> None:
        usable = self.profile.has(spec.tp)
        if not usable:
            log.error(
                "instance %s is TP-%d but profile %r covers TP %s: it will get no requests; "
                "profile TP-%d or remove it from the cluster",
                spec.instance_id,
                spec.tp,
                self.profile.name,
                list(self.profile.tp_degrees),
                spec.tp,
            )
        self.pool.add(spec, usable)
        self._max_batch_seen = max(self._max_batch_seen, spec.max_batch_tokens)
        self.backend.launch_instance(spec)

    # ================================================================ misc
    def _request_limit(self) -> int | None:
        if self.config.max_request_tokens is not None:
            return self.config.max_request_tokens
        limits = [self._max_batch_seen] if self._max_batch_seen else []
        if self.reconfigurator is not None:
            limits.append(self.reconfigurator.max_batch_tokens)
        return max(limits) if limits else None

    def _warn(self, kind: str, msg: str, *args) -> None:
        last = self._last_warn.get(kind, -np.inf)
        if self.now - last >= self.config.warn_interval_s:
            self._last_warn[kind] = self.now
            log.warning(msg, *args)
