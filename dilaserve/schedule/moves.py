"""When a just-stepped request moves to another instance (docs/architecture.md section 8):
at a legal migration point, where the migration policy proposes a destination and the
move repays the rebuild it costs there; a draining instance's requests leave for
wherever they fit.
"""

from __future__ import annotations

from dilaserve.cluster.base import Backend
from dilaserve.control.request import TrackedRequest
from dilaserve.profile.types import LatencyProfile
from dilaserve.schedule.migration.cost import move_pays
from dilaserve.schedule.observer import SchedulerObserver
from dilaserve.schedule.pool import InstancePool


class Moves:
    """The migration part of :class:`~dilaserve.schedule.scheduler.GlobalScheduler` (a
    mixin: the scheduler owns the state named below)."""

    backend: Backend
    profile: LatencyProfile
    pool: InstancePool
    observer: SchedulerObserver
    migrations: int

    def _decide_migration(self, req: TrackedRequest, src: int, touched: set[int]) -> None:
        """Whether a just-stepped request moves, and where (it stays unless a move pays); a
        request on a draining instance leaves for wherever it fits. Placed by slack, a
        request stays where it was put: moving it to a faster instance would fill the light
        instances that placement keeps for the requests that need them."""
        if not self.migration_point.allows(req):
            return
        draining = self.pool.draining[src]
        if not draining and self._places_by_slack:
            return
        mask = self._mask(req)
        mask[src] = False
        if draining:
            dst = self.dispatch.choose(req, self.pool, mask)  # leave whenever anywhere fits
        else:
            dst = self.migration.propose(req, src, self.pool, mask)
        if dst is None:
            return
        pool = self.pool
        if (
            not pool.draining[src]
            and self.migration_point.priced(req)
            and not move_pays(
                self.profile,
                req,
                (int(pool.tp[src]), int(pool.n_reqs[src])),
                (int(pool.tp[dst]), int(pool.n_reqs[dst])),
            )
        ):
            return  # the rebuild on the destination would cost more than the move saves
        self.pool.unassign(src, req.request_id, req.tokens)
        self.pool.assign(dst, req.request_id, req.tokens)
        # The backend marks the state: the destination has no K/V for this block yet.
        self.backend.migrate(req.state, self.pool.ids[src], self.pool.ids[dst])
        req.instance = self.pool.ids[dst]
        self.migrations += 1
        self.observer.on_migration(req.request_id, self.pool.ids[src], self.pool.ids[dst])
        touched.add(dst)
