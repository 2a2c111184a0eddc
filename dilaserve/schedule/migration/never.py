from __future__ import annotations

import numpy as np

from dilaserve.control.request import TrackedRequest
from dilaserve.schedule.migration.base import MigrationPolicy, migration_policies
from dilaserve.schedule.pool import InstancePool


@migration_policies.register("none")
class NoMigration(MigrationPolicy):
    """Requests stay where they were dispatched (INFaaS-like)."""

    def propose(self, req: TrackedRequest, src: int, pool: InstancePool, mask: np.ndarray) -> int | None:
        return None
