from __future__ import annotations

import abc

from dilaserve.control.request import TrackedRequest
from dilaserve.utils.registry import Registry


class MigrationPoint(abc.ABC):
    """Decides whether a request, between two steps, may move to another instance."""

    @abc.abstractmethod
    def allows(self, req: TrackedRequest) -> bool: ...


migration_points: Registry[type[MigrationPoint]] = Registry("migration point")
