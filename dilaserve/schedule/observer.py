"""What the scheduler tells whoever watches it (the HTTP runtime's streaming and metrics,
the simulator's request table).

The scheduler calls a :class:`SchedulerObserver`'s hooks as it handles events; this is its
one channel out: the watcher never rebinds the backend's event sink, patches callbacks onto
the scheduler or diffs its counters. Every hook defaults to doing nothing, so an observer
overrides only what it needs.
"""

from __future__ import annotations

from dilaserve.cluster.base import InstanceFailed, StepFinished
from dilaserve.schedule.events import RequestOutcome


class SchedulerObserver:
    """Hooks called synchronously on the scheduler's loop; they must not raise or block."""

    def on_step(self, event: StepFinished) -> None:
        """An instance finished a step; called before the scheduler adopts the new states,
        so a request that this step finished is seen here before its outcome is emitted."""

    def on_outcome(self, outcome: RequestOutcome) -> None:
        """A request left the scheduler: finished, rejected or cancelled (every outcome, also
        the ones older than ``GlobalScheduler.outcomes`` keeps)."""

    def on_migration(self, request_id: str, src: str, dst: str) -> None:
        """A request moved from instance ``src`` to ``dst`` (its next step runs there)."""

    def on_plan(self, plan) -> None:
        """A reconfiguration plan (:class:`~dilaserve.reconfig.plan.ReconfigPlan`) started executing."""

    def on_instance(self, instance_id: str, ready: bool) -> None:
        """An instance became ready (``ready``), or stopped or failed (not ``ready``)."""

    def on_failure(self, event: InstanceFailed, resumed: int, replacement: str | None) -> None:
        """An instance died: the ``resumed`` requests it held were re-queued (they go on
        elsewhere from the state of their last finished step), and ``replacement`` is the
        id of the instance launched on its GPUs (None: not replaced)."""
