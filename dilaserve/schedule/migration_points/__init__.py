"""Migration points: when, between two steps, a request may move to another instance.

Kept apart from the migration policies (which decide whether and where it moves) so a
policy only ranks destinations (docs/architecture.md section 3: with caching, a move right
before a recompute step costs nothing).
"""

from dilaserve.schedule.migration_points import any_step, recompute_only  # noqa: F401  (registers)
from dilaserve.schedule.migration_points.base import MigrationPoint, migration_points

__all__ = ["MigrationPoint", "migration_points"]
