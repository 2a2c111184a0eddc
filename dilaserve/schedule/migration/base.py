from __future__ import annotations

import abc

import numpy as np

from dilaserve.control.request import TrackedRequest
from dilaserve.profile.types import LatencyProfile
from dilaserve.schedule.pool import InstancePool
from dilaserve.utils.registry import Registry


class MigrationPolicy(abc.ABC):
    def __init__(self, profile: LatencyProfile):
        self.profile = profile

    @abc.abstractmethod
    def propose(self, req: TrackedRequest, src: int, pool: InstancePool, mask: np.ndarray) -> int | None:
        """Destination slot for ``req`` now on ``src`` (``mask`` excludes ``src``), or None to stay."""


migration_policies: Registry[type[MigrationPolicy]] = Registry("migration policy")
