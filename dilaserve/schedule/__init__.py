"""Step-level global scheduler: instance selection, deferral, migration (docs/architecture.md sections 1 and 8)."""

from dilaserve.schedule.config import SchedulerConfig
from dilaserve.schedule.events import Event, ReconfigTick, RequestArrived, RequestOutcome
from dilaserve.schedule.policies import SchedulerPolicy, get_policy, policies
from dilaserve.schedule.scheduler import GlobalScheduler

__all__ = [
    "Event",
    "GlobalScheduler",
    "ReconfigTick",
    "RequestArrived",
    "RequestOutcome",
    "SchedulerConfig",
    "SchedulerPolicy",
    "get_policy",
    "policies",
]
