from __future__ import annotations

import numpy as np

from dilaserve.control.request import TrackedRequest
from dilaserve.schedule.dispatch.least_tokens import least_tokens_slot
from dilaserve.schedule.migration.base import MigrationPolicy, migration_policies
from dilaserve.schedule.pool import InstancePool


@migration_policies.register("load_balance")
class LoadBalance(MigrationPolicy):
    """Move to the least-loaded instance (tokens) when that narrows the imbalance (Llumnix-like):
    the destination, with the request, must hold fewer tokens than the source does now."""

    def propose(self, req: TrackedRequest, src: int, pool: InstancePool, mask: np.ndarray) -> int | None:
        dst = least_tokens_slot(pool, mask)
        if dst is None:
            return None
        return dst if pool.tokens[dst] + req.tokens < pool.tokens[src] else None
