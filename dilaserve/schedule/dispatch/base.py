from __future__ import annotations

import abc

import numpy as np

from dilaserve.control.request import TrackedRequest
from dilaserve.profile.types import LatencyProfile
from dilaserve.schedule.pool import InstancePool
from dilaserve.utils.registry import Registry


class DispatchPolicy(abc.ABC):
    def __init__(self, profile: LatencyProfile):
        self.profile = profile

    @abc.abstractmethod
    def choose(self, req: TrackedRequest, pool: InstancePool, mask: np.ndarray) -> int | None:
        """Slot for ``req`` among the ``mask``-ed instances, or None when none is allowed."""


dispatch_policies: Registry[type[DispatchPolicy]] = Registry("dispatch policy")
