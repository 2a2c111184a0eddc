from __future__ import annotations

from dilaserve.control.request import TrackedRequest
from dilaserve.engine.state import StepKind
from dilaserve.schedule.migration_points.base import MigrationPoint, migration_points


@migration_points.register("recompute")
class BeforeRecompute(MigrationPoint):
    """With caching, move only right before a recompute step: the destination rebuilds the
    cache in that step anyway, so the move costs nothing. Without caching, any step.

    A block-causal request has one recompute step, its prefill, so it may also move between
    any two later steps, at the price of a prefill on the destination that the move must
    repay (:meth:`priced`)."""

    def allows(self, req: TrackedRequest) -> bool:
        return req.state.block_causal or req.state.next_kind is StepKind.RECOMPUTE

    def priced(self, req: TrackedRequest) -> bool:
        return req.state.block_causal and req.state.next_kind is StepKind.CACHE
