from __future__ import annotations

from dilaserve.control.request import TrackedRequest
from dilaserve.engine.state import StepKind
from dilaserve.schedule.migration_points.base import MigrationPoint, migration_points


@migration_points.register("recompute")
class BeforeRecompute(MigrationPoint):
    """With caching, move only right before a recompute step: the destination rebuilds the
    cache in that step anyway, so the move costs nothing. Without caching, any step."""

    def allows(self, req: TrackedRequest) -> bool:
        return req.state.next_kind is StepKind.RECOMPUTE
