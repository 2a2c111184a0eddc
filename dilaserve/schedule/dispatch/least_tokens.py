from __future__ import annotations

import numpy as np

from dilaserve.control.request import TrackedRequest
from dilaserve.schedule.dispatch.base import DispatchPolicy, dispatch_policies
from dilaserve.schedule.pool import InstancePool


def least_tokens_slot(pool: InstancePool, mask: np.ndarray) -> int | None:
    if not mask.any():
        return None
    return int(np.argmin(np.where(mask, pool.tokens, np.inf)))


@dispatch_policies.register("least_tokens")
class LeastTokens(DispatchPolicy):
    """The least-loaded instance, load counted in tokens (INFaaS-like)."""

    def choose(self, req: TrackedRequest, pool: InstancePool, mask: np.ndarray) -> int | None:
        return least_tokens_slot(pool, mask)
