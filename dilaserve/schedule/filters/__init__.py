"""Filters: which instances may take a request, and when a request may move.

Kept apart from dispatch and migration policies so a policy only ranks candidates.
"""
from dilaserve.schedule.filters import any_step, batch_room, recompute_only  # noqa: F401  (registers)
from dilaserve.schedule.filters.base import (
    InstanceFilter, MigrationPoint, instance_filters, migration_points,
)

__all__ = ["InstanceFilter", "MigrationPoint", "instance_filters", "migration_points"]
