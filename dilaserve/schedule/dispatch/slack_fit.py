"""Slack-aware placement: the busiest instance a request still fits on (best fit).

Step latency grows with the tokens in the batch, roughly in proportion past a few hundred
tokens, so an instance is a processor shared by its batch: a request's steps run faster the
fewer tokens it shares them with, while the cluster's throughput barely depends on how the
tokens are spread. Spreading every request evenly (lowest latency) leaves no instance with
a small batch at high load, and a request whose SLO is close to its isolated latency (an
interactive tier) then fits nowhere and is refused. Best fit puts each request on the
*busiest* instance where it still makes its SLO with headroom and pushes no request there
out of its own, so requests with slack fill the busy instances and the light ones stay light
for the requests that need them (docs/architecture.md, "Slack-aware placement").

The fit itself is the controller's admission test, which the scheduler applies along
:meth:`SlackFit.rank`; where the request fits nowhere, :meth:`choose` (the lowest step
latency) is the fallback, and admission decides there as it would for any dispatch.
"""

from __future__ import annotations

import numpy as np

from dilaserve.control.request import TrackedRequest
from dilaserve.schedule.dispatch.base import DispatchPolicy, dispatch_policies
from dilaserve.schedule.dispatch.lowest_latency import best_by_latency
from dilaserve.schedule.pool import InstancePool


@dispatch_policies.register("slack_fit")
class SlackFit(DispatchPolicy):
    """Best fit by slack: instances tried busiest first; the lowest latency as the fallback."""

    fits_by_slack = True

    def rank(self, req: TrackedRequest, pool: InstancePool, mask: np.ndarray) -> list[int]:
        """The allowed slots, the one where ``req`` would run its steps slowest first."""
        slots = np.flatnonzero(mask)
        if not len(slots):
            return []
        joined = pool.tokens[slots] + req.tokens
        latency = np.array([self.profile.latency(int(pool.tp[s]), float(t)) for s, t in zip(slots, joined)])
        # Ties (equal batches) go to the lower slot, so runs repeat exactly.
        return [int(s) for s in slots[np.lexsort((slots, -latency))]]

    def choose(self, req: TrackedRequest, pool: InstancePool, mask: np.ndarray) -> int | None:
        return best_by_latency(self.profile, pool, mask, req.tokens)[0]
