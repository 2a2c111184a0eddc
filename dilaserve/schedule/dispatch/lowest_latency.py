from __future__ import annotations

import numpy as np

from dilaserve.control.request import TrackedRequest
from dilaserve.profile.types import LatencyProfile
from dilaserve.schedule.dispatch.base import DispatchPolicy, dispatch_policies
from dilaserve.schedule.pool import InstancePool


def best_by_latency(
    profile: LatencyProfile, pool: InstancePool, mask: np.ndarray, extra_tokens: int
) -> tuple[int | None, float]:
    """The allowed slot minimising LP[tp][tokens + extra_tokens], and that latency.

    Step latency grows with batch tokens, so within one TP degree the candidate is the
    allowed instance with the fewest tokens; only one profile lookup per degree is needed.
    """
    best, best_cost = None, np.inf
    tokens = pool.tokens
    for tp, slots in pool.tp_groups().items():
        m = mask[slots]
        if not m.any():
            continue
        s = int(slots[np.argmin(np.where(m, tokens[slots], np.inf))])
        cost = profile.latency(tp, tokens[s] + extra_tokens)
        if cost < best_cost:
            best, best_cost = s, cost
    return best, best_cost


@dispatch_policies.register("lowest_latency")
class LowestLatency(DispatchPolicy):
    """The instance with the lowest predicted step latency once the request joins it."""

    def choose(self, req: TrackedRequest, pool: InstancePool, mask: np.ndarray) -> int | None:
        return best_by_latency(self.profile, pool, mask, req.tokens)[0]
