from __future__ import annotations

from dilaserve.control.request import TrackedRequest
from dilaserve.schedule.migration_points.base import MigrationPoint, migration_points


@migration_points.register("any")
class AnyStep(MigrationPoint):
    """Move between any two steps (an ablation with caching: a move before a cache step
    forces an extra recompute step on the destination)."""

    def allows(self, req: TrackedRequest) -> bool:
        return True
