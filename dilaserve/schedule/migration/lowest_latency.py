from __future__ import annotations

import numpy as np

from dilaserve.control.request import TrackedRequest
from dilaserve.schedule.dispatch.lowest_latency import best_by_latency
from dilaserve.schedule.migration.base import MigrationPolicy, migration_policies
from dilaserve.schedule.pool import InstancePool


@migration_policies.register("lowest_latency")
class LowestLatencyMigration(MigrationPolicy):
    """Re-place a request on the instance with the lowest step latency once it joins.

    It moves only if that beats its current instance's latency (whose tokens already
    include it); the comparison is strict, so a move never undoes itself on the next step.
    """

    def propose(self, req: TrackedRequest, src: int, pool: InstancePool, mask: np.ndarray) -> int | None:
        dst, cost = best_by_latency(self.profile, pool, mask, req.tokens)
        if dst is None:
            return None
        here = self.profile.latency(int(pool.tp[src]), pool.tokens[src])
        return dst if cost < here else None
