from __future__ import annotations

import numpy as np

from dilaserve.control.request import TrackedRequest
from dilaserve.schedule.filters.base import InstanceFilter, instance_filters
from dilaserve.schedule.pool import InstancePool


@instance_filters.register("batch_room")
class BatchRoom(InstanceFilter):
    """Accepting instances whose batch tokens + the request's tokens fit the batch limit."""

    def mask(self, req: TrackedRequest, pool: InstancePool) -> np.ndarray:
        return pool.room_mask(req.tokens)
