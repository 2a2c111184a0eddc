"""Backend interface (RayBackend and SimBackend implement it)."""

from dilaserve.cluster.base import (
    Backend,
    BackendEvent,
    EventSink,
    InstanceReady,
    InstanceSpec,
    InstanceStopped,
    StepAssignment,
    StepFinished,
)

__all__ = [
    "Backend",
    "BackendEvent",
    "EventSink",
    "InstanceReady",
    "InstanceSpec",
    "InstanceStopped",
    "StepAssignment",
    "StepFinished",
]
