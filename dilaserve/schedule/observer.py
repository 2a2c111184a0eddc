"""What the scheduler tells whoever watches it (the HTTP runtime's streaming and metrics).

The scheduler calls a :class:`SchedulerObserver`'s hooks as it handles events; the
watcher never rebinds the backend's event sink or diffs the scheduler's counters. Every
hook defaults to doing nothing, so an observer overrides only what it needs.
"""

from __future__ import annotations

from dilaserve.cluster.base import StepFinished


class SchedulerObserver:
    """Hooks called synchronously on the scheduler's loop; they must not raise or block."""

    def on_step(self, event: StepFinished) -> None:
        """An instance finished a step; called before the scheduler adopts the new states,
        so a request that this step finished is seen here before its outcome is emitted."""

    def on_migration(self, request_id: str, src: str, dst: str) -> None:
        """A request moved from instance ``src`` to ``dst`` (its next step runs there)."""

    def on_plan(self, plan) -> None:
        """A reconfiguration plan (:class:`~dilaserve.reconfig.plan.ReconfigPlan`) started executing."""

    def on_instance(self, instance_id: str, ready: bool) -> None:
        """An instance became ready (``ready``) or stopped (not ``ready``)."""
