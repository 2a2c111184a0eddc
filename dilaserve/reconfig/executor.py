"""Executes a :class:`ReconfigPlan` one step at a time, driven by scheduler events."""

from __future__ import annotations

import logging
from collections.abc import Callable
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
    until they have stopped, and launch the new instance. A step that stops instances waits
    until every instance launched so far is ready, so the cluster never has more offline
    than one step's worth; a step whose GPUs are already free (its ``stop_first`` is empty)
    launches at once. A plan back to TP-1 from a TP-4 instance then drains the TP-4 once and
    starts its four TP-1 instances together, where waiting for each to load before the next
    would leave freed GPUs idle for four launch times."""

    def __init__(self, plan: ReconfigPlan):
        self.plan = plan
        self._i = 0
        self._phase = "drain"
        self._stopped: set[str] = set()
        self._ready: set[str] = set()
        #: Launched instances not yet ready (a failed launch's replacement stands in for it).
        self._pending: set[str] = set()

    @property
    def done(self) -> bool:
        return self._i >= len(self.plan.steps) and not self._pending

    def on_ready(self, instance_id: str) -> None:
        self._ready.add(instance_id)
        self._pending.discard(instance_id)

    def on_stopped(self, instance_id: str) -> None:
        self._stopped.add(instance_id)

    def on_failed(self, instance_id: str, replacement: str | None) -> None:
        """An instance died. One the plan stops counts as stopped. If it is a launch the
        plan waits for, the plan waits for its ``replacement`` instead; with none it cannot
        go on, and it ends here (the next reconfiguration tick re-plans)."""
        self._stopped.add(instance_id)
        if instance_id not in self._pending:
            return
        self._pending.discard(instance_id)
        if replacement is not None:
            self._pending.add(replacement)
            return
        log.warning("reconfig: launched instance %s failed and is not replaced; the plan ends here", instance_id)
        self._i = len(self.plan.steps)

    def poll(self, idle: Callable[[str], bool]) -> list[Action]:
        """Actions that can happen now; ``idle(id)`` says an instance has no work left."""
        out: list[Action] = []
        while self._i < len(self.plan.steps):
            step = self.plan.steps[self._i]
            if self._phase == "drain":
                if step.stop_first and self._pending:
                    break  # take nothing more offline until the launches so far are up
                out += [Drain(i) for i in step.stop_first]
                self._phase = "wait_idle"
            if self._phase == "wait_idle":
                if not all(idle(i) for i in step.stop_first):
                    break
                out += [Stop(i) for i in step.stop_first]
                self._phase = "wait_stopped"
            if self._phase == "wait_stopped":
                if not all(i in self._stopped for i in step.stop_first):
                    break
                out.append(Launch(step.launch))
                if step.launch.instance_id not in self._ready:
                    self._pending.add(step.launch.instance_id)
                self._i += 1
                self._phase = "drain"
        return out
