from __future__ import annotations

import abc

from dilaserve.control.request import TrackedRequest
from dilaserve.utils.registry import Registry


class MigrationPoint(abc.ABC):
    """Decides whether a request, between two steps, may move to another instance."""

    @abc.abstractmethod
    def allows(self, req: TrackedRequest) -> bool: ...

    def priced(self, req: TrackedRequest) -> bool:
        """Whether a move allowed here drops a cache the destination must rebuild at a cost
        the move has to repay (:func:`~dilaserve.schedule.migration.cost.move_pays`)."""
        return False


migration_points: Registry[type[MigrationPoint]] = Registry("migration point")
