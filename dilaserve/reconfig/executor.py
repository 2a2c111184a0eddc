"""Executes a :class:`ReconfigPlan` one step at a time, driven by scheduler events."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dilaserve.cluster.base import InstanceSpec
from dilaserve.reconfig.plan import ReconfigPlan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Drain:
    instance_id: str


@dataclass(frozen=True)
class Stop:
    instance_id: str


@dataclass(frozen=True)
class Launch:
    spec: InstanceSpec


Action = Drain | Stop | Launch


class PlanExecutor:
    """For each step: drain the instances in its way, stop them once idle and empty, wait
    until they have stopped, and launch the new instance. Launches keep the plan's order (a
    step with no ``stop_first`` may use GPUs an earlier step freed), so a plan back to TP-1
    from a TP-4 instance drains the TP-4 once and starts its four TP-1 instances together.

    How much of the cluster may be offline at once (draining, stopping or loading) is a
    rolling update's budget, as Kubernetes' ``maxUnavailable``:

    - ``max_offline_gpus=None``: one step's worth. A step that stops instances waits until
      every instance launched so far is ready.
    - ``max_offline_gpus=N``: steps start draining in order while the GPUs offline stay
      within N (one step always may), so a plan that touches every node takes a few launch
      times, not one per node. ``gpus_of`` gives each instance's GPU count (1 if missing).
    """

    def __init__(
        self, plan: ReconfigPlan, max_offline_gpus: int | None = None, gpus_of: Mapping[str, int] | None = None
    ):
        self.plan = plan
        self.max_offline_gpus = max_offline_gpus
        self._gpus_of = dict(gpus_of or {})
        self._i = 0  # the next step to launch (launches keep the plan's order)
        self._started = 0  # steps whose drains were issued
        self._stop_issued: set[int] = set()
        self._stopped: set[str] = set()
        self._ready: set[str] = set()
        #: Launched instances not yet ready (a failed launch's replacement stands in for it).
        self._pending: dict[str, int] = {}

    @property
    def done(self) -> bool:
        return self._i >= len(self.plan.steps) and not self._pending

    def on_ready(self, instance_id: str) -> None:
        self._ready.add(instance_id)
        self._pending.pop(instance_id, None)

    def on_stopped(self, instance_id: str) -> None:
        self._stopped.add(instance_id)

    def on_failed(self, instance_id: str, replacement: str | None) -> None:
        """An instance died. One the plan stops counts as stopped. If it is a launch the
        plan waits for, the plan waits for its ``replacement`` instead; with none it cannot
        go on, and it ends here (the next reconfiguration tick re-plans)."""
        self._stopped.add(instance_id)
        if instance_id not in self._pending:
            return
        gpus = self._pending.pop(instance_id)
        if replacement is not None:
            self._pending[replacement] = gpus
            return
        log.warning("reconfig: launched instance %s failed and is not replaced; the plan ends here", instance_id)
        self._i = self._started = len(self.plan.steps)

    def _stop_gpus(self, step) -> int:
        """GPUs of the instances ``step`` takes down."""
        return sum(self._gpus_of.get(i, 1) for i in step.stop_first)

    def _offline_gpus(self) -> int:
        """GPUs of the instances that started steps take down, until the step launches, plus
        GPUs of launches not yet ready."""
        stopping = sum(self._stop_gpus(self.plan.steps[k]) for k in range(self._i, self._started))
        return stopping + sum(self._pending.values())

    def _may_start(self, step) -> bool:
        if not step.stop_first:
            return True
        if self.max_offline_gpus is None:
            return not self._pending and self._started == self._i  # one step's worth at a time
        offline = self._offline_gpus()
        return offline == 0 or offline + self._stop_gpus(step) <= self.max_offline_gpus

    def poll(self, idle: Callable[[str], bool]) -> list[Action]:
        """Actions that can happen now; ``idle(id)`` says an instance has no work left."""
        out: list[Action] = []
        steps = self.plan.steps
        while self._started < len(steps) and self._may_start(steps[self._started]):
            out += [Drain(i) for i in steps[self._started].stop_first]
            self._started += 1
        for k in range(self._i, self._started):
            if k not in self._stop_issued and all(idle(i) for i in steps[k].stop_first):
                out += [Stop(i) for i in steps[k].stop_first]
                self._stop_issued.add(k)
        while self._i < self._started and self._i in self._stop_issued:
            step = steps[self._i]
            if not all(i in self._stopped for i in step.stop_first):
                break
            out.append(Launch(step.launch))
            if step.launch.instance_id not in self._ready:
                self._pending[step.launch.instance_id] = len(step.launch.gpus)
            self._i += 1
        if self._i == self._started and self._started < len(steps) and self._may_start(steps[self._started]):
            out += self.poll(idle)  # a launch freed the budget for the next step
        return out
