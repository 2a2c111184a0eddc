"""Scheduler events and outcomes.

Backend events (step finished, instance ready, stopped or failed) are defined with the
backend interface; this module adds the two that come from elsewhere: arrivals (frontend or
workload) and reconfiguration ticks (a timer).
"""

from __future__ import annotations

from dataclasses import dataclass

from dilaserve.cluster.base import InstanceFailed, InstanceReady, InstanceStopped, StepFinished
from dilaserve.control.request import TrackedRequest


@dataclass(frozen=True)
class RequestArrived:
    time: float
    request: TrackedRequest


@dataclass(frozen=True)
class ReconfigTick:
    time: float


Event = RequestArrived | StepFinished | InstanceReady | InstanceStopped | InstanceFailed | ReconfigTick


@dataclass(frozen=True)
class RequestOutcome:
    """What happened to a request: ``finished``, ``rejected`` or ``cancelled`` (with a reason).

    ``retry_after_s`` is set when a request was refused for load (SLO-aware admission):
    when a retry may be served.
    """

    request_id: str
    status: str
    arrival: float
    deadline: float
    time: float
    reason: str | None = None
    late_on_arrival: bool = False
    retry_after_s: float | None = None

    @property
    def latency(self) -> float:
        return self.time - self.arrival

    @property
    def met_slo(self) -> bool:
        return self.status == "finished" and self.time <= self.deadline
