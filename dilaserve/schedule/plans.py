"""How the scheduler drives reconfiguration plans (docs/architecture.md section 1, dataflow).

A plan comes from a reconfiguration tick, from the way home after a tuning, or from an
operator (:meth:`PlanDriver.apply_plan`); with a tuner, a proposed plan runs only where the
tuner's replay of the last window says it pays. The executor's drains, stops and launches
are advanced at the end of every event.
"""

from __future__ import annotations

import logging

from dilaserve.cluster.base import InstanceSpec
from dilaserve.control.controller import ThresholdController
from dilaserve.reconfig.executor import Drain, Launch, PlanExecutor, Stop
from dilaserve.reconfig.reconfigurator import Reconfigurator
from dilaserve.schedule.observer import SchedulerObserver
from dilaserve.schedule.pool import InstancePool
from dilaserve.schedule.tuner import OperatingPointTuner

log = logging.getLogger(__name__)


class PlanDriver:
    """The plan-driving part of :class:`~dilaserve.schedule.scheduler.GlobalScheduler`
    (a mixin: the scheduler owns the state named below)."""

    reconfigurator: Reconfigurator | None
    tuner: OperatingPointTuner | None
    controller: ThresholdController
    observer: SchedulerObserver
    pool: InstancePool
    executor: PlanExecutor | None
    _home: list[InstanceSpec] | None
    now: float

    def _on_tick(self) -> None:
        if self.reconfigurator is None:
            return
        if self.executor is not None and not self.executor.done:
            log.info("reconfiguration tick at %.1fs skipped: the previous plan is still executing", self.now)
            return
        existing = self.pool.active_specs()
        plan = self.reconfigurator.tick(self.now, existing, self._home or existing, self._lowest_threshold())
        self._offer(plan, existing)

    def _offer(self, plan, existing: list[InstanceSpec]) -> None:
        """Start ``plan`` (None: nothing to do), or with a tuner, once its replay says it pays."""
        if plan is None:
            return
        if self.tuner is None:
            self._start_plan(plan)
        else:
            self._check_plan(existing, plan)

    def _check_plan(self, existing: list[InstanceSpec], plan) -> None:
        """Start ``plan`` once the tuner's replay of the last window says its layout, its
        transition counted, makes more goodput than ``existing``, and loses none when the
        window's arrivals come at the peak rate (:meth:`Reconfigurator.peak_rps`: the
        operator's, or the rate the starting layout was built to carry;
        :meth:`OperatingPointTuner.check_layout`). The verdict comes back at once in the
        simulator and between steps in a server; by then the cluster must still be the
        one the plan was made for, with no other plan running."""
        target = [s for s in existing if s.instance_id in set(plan.keep)] + [st.launch for st in plan.steps]
        share, peak = self.reconfigurator.replay_terms(self.now, plan, self._home or existing)
        ids = [s.instance_id for s in existing]

        def verdict(pays: bool) -> None:
            idle = self.executor is None or self.executor.done
            if pays and idle and [s.instance_id for s in self.pool.active_specs()] == ids:
                self._start_plan(plan)

        self.tuner.check_layout(self.now, existing, target, self.controller.point, verdict, share, peak_rate=peak)

    def _start_plan(self, plan) -> None:
        self.executor = self._executor(plan)  # advanced at the end of this event
        self.observer.on_plan(plan)

    def _after_tuning(self) -> None:
        """After a tuning: perhaps back to the starting layout (:meth:`_maybe_go_home`), and
        where an SLO tier is out of that layout's reach, the reconfiguration tick's plan
        made ahead at once (:meth:`Reconfigurator.needs_reach`). There the layout must follow
        the load both ways, and the tuner's window shows a fall as soon as it shows a rise:
        waiting for the next tick would run a quiet phase on the peak's layout for up to a
        tick's interval. Elsewhere plans wait for the tick, as before.

        Where a tier is out of reach, the fast layout was made ahead for it, and the way home
        is for throughput: it is asked for only when the load outgrew the layout (a tuning
        tripped by a rise, or a recent rate past what the layout carries,
        :meth:`_load_outgrew`). A window's replay alone, in a quiet phase with bursts of its
        own, sent the cluster home and back within a minute, two transitions for nothing."""
        if self.reconfigurator is None or not self._home or (self.executor is not None and not self.executor.done):
            return
        lowest = self._lowest_threshold()
        if not self.reconfigurator.needs_reach(self.now, self._home, lowest):
            self._maybe_go_home()
            return
        existing = self.pool.active_specs()
        if not self.reconfigurator.at_home(existing, self._home) and self._load_outgrew(existing):
            self._maybe_go_home(node_by_node=True)
            if self.executor is not None and not self.executor.done:
                return
        # What the tick would do here, without judging the reach a second time.
        self._offer(self.reconfigurator.propose_ahead(self.now, existing, self._home, lowest), existing)

    def _load_outgrew(self, existing: list[InstanceSpec]) -> bool:
        """The last tuning was tripped by a rise of the arrival rate, or the recent rate is
        past what ``existing`` carries at the lowest threshold (its capacity headroom kept)."""
        if self.tuner is not None and self.tuner.last_rose:
            return True
        rc = self.reconfigurator
        return rc.recent_rate(self.now) * (1 + rc.config.capacity_headroom) > rc.carried_rps(self.now, existing)

    def _maybe_go_home(self, node_by_node: bool = False) -> None:
        """After a tuning: back to the layout the cluster started with where the window now
        replays better there. A plan is made for the load just seen; when the load moves
        (a low phase planned for, then a peak), waiting for the next tick and for the
        monitor's window to fill would run the peak on the wrong layout for minutes, while
        the tuner's window shows it within one interval. ``node_by_node``: the load outgrew
        the layout, and the way home keeps every node it can serving
        (:meth:`Reconfigurator.plan_home`)."""
        if self.reconfigurator is None or not self._home or (self.executor is not None and not self.executor.done):
            return
        existing = self.pool.active_specs()
        plan = self.reconfigurator.plan_home(self.now, existing, self._home, node_by_node)
        if plan is not None:
            self._check_plan(existing, plan)

    def _lowest_threshold(self) -> float:
        """The lowest threshold the controller may run (its quality budget's): a tier out of
        the starting layout's reach there makes the reconfigurator plan ahead."""
        return float(self.controller.thresholds[int(self.controller.budget_mask.argmax())])

    def _executor(self, plan) -> PlanExecutor:
        """An executor for ``plan`` within the reconfigurator's offline budget (one step at a
        time for an operator's plan on a server without one)."""
        gpus_of = {s.instance_id: len(s.gpus) for s in self.pool.active_specs()}
        if self.reconfigurator is None:
            return PlanExecutor(plan, gpus_of=gpus_of)
        budget = plan.max_offline_gpus if plan.max_offline_gpus is not None else self.reconfigurator.offline_gpus()
        return PlanExecutor(plan, budget, gpus_of)

    def apply_plan(self, plan) -> bool:
        """Start executing a plan made outside a tick (e.g. by an operator);
        False while another plan is still executing."""
        if self.executor is not None and not self.executor.done:
            log.warning("reconfiguration refused: the previous plan is still executing")
            return False
        self.executor = self._executor(plan)
        self.observer.on_plan(plan)
        self._advance_plan()
        return True

    def _advance_plan(self) -> None:
        if self.executor is None or self.executor.done:
            return
        for action in self.executor.poll(self._idle):
            if isinstance(action, Drain):
                slot = self.pool.slot_of.get(action.instance_id)
                if slot is not None:
                    log.info("reconfig: draining %s", action.instance_id)
                    self.pool.set_draining(slot)
            elif isinstance(action, Stop):
                if action.instance_id not in self.pool.slot_of:
                    self.executor.on_stopped(action.instance_id)  # already gone
                    continue
                log.info("reconfig: stopping %s", action.instance_id)
                self.backend.stop_instance(action.instance_id)
            elif isinstance(action, Launch):
                log.info(
                    "reconfig: launching %s (TP-%d on node %d)",
                    action.spec.instance_id,
                    action.spec.tp,
                    action.spec.node,
                )
                self._launch(action.spec)

    def _idle(self, instance_id: str) -> bool:
        slot = self.pool.slot_of.get(instance_id)
        return slot is None or self.pool.idle_empty(slot)
