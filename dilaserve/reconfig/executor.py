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
    until they have stopped, launch the new instance, wait until it is ready."""

    def __init__(self, plan: ReconfigPlan):
        self.plan = plan
        self._i = 0
        self._phase = "drain"
        self._stopped: set[str] = set()
        self._ready: set[str] = set()
        #: The instance standing in for the current step's launch after that launch failed.
        self._stand_in: str | None = None

    @property
    def done(self) -> bool:
        return self._i >= len(self.plan.steps)

    def on_ready(self, instance_id: str) -> None:
        self._ready.add(instance_id)

    def on_stopped(self, instance_id: str) -> None:
        self._stopped.add(instance_id)

    def on_failed(self, instance_id: str, replacement: str | None) -> None:
        """An instance died. One the plan stops counts as stopped. If it is the launch the
        plan waits for, the plan waits for its ``replacement`` instead; with none it cannot
        go on, and it ends here (the next reconfiguration tick re-plans)."""
        self._stopped.add(instance_id)
        if self.done or self._phase != "wait_ready" or self._awaited() != instance_id:
            return
        if replacement is not None:
            self._stand_in = replacement
            return
        log.warning("reconfig: launched instance %s failed and is not replaced; the plan ends here", instance_id)
        self._i = len(self.plan.steps)

    def _awaited(self) -> str:
        return self._stand_in or self.plan.steps[self._i].launch.instance_id

    def poll(self, idle: Callable[[str], bool]) -> list[Action]:
        """Actions that can happen now; ``idle(id)`` says an instance has no work left."""
        out: list[Action] = []
        while not self.done:
            step = self.plan.steps[self._i]
            if self._phase == "drain":
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
                self._phase = "wait_ready"
            if self._phase == "wait_ready":
                if self._awaited() not in self._ready:
                    break
                self._i += 1
                self._phase, self._stand_in = "drain", None
        return out
