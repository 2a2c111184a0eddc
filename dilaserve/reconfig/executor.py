"""Executes a :class:`ReconfigPlan` one step at a time, driven by scheduler events."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dilaserve.cluster.base import InstanceSpec
from dilaserve.reconfig.plan import ReconfigPlan


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

    @property
    def done(self) -> bool:
        return self._i >= len(self.plan.steps)

    def on_ready(self, instance_id: str) -> None:
        self._ready.add(instance_id)

    def on_stopped(self, instance_id: str) -> None:
        self._stopped.add(instance_id)

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
                if step.launch.instance_id not in self._ready:
                    break
                self._i += 1
                self._phase = "drain"
        return out
