"""Migration policies: whether a just-stepped request should move, and where."""

from dilaserve.schedule.migration import load_balance, lowest_latency, never  # noqa: F401  (registers)
from dilaserve.schedule.migration.base import MigrationPolicy, migration_policies

__all__ = ["MigrationPolicy", "migration_policies"]
