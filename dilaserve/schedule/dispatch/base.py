from __future__ import annotations

import abc

import numpy as np

from dilaserve.control.request import TrackedRequest
from dilaserve.profile.types import LatencyProfile
from dilaserve.schedule.pool import InstancePool
from dilaserve.utils.registry import Registry


class DispatchPolicy(abc.ABC):
    #: The scheduler places a request on the first slot of :meth:`rank` it fits (the
    #: controller's admission test with headroom), and on :meth:`choose`'s where it fits none.
    fits_by_slack = False

    def __init__(self, profile: LatencyProfile):
        self.profile = profile

    def rank(self, req: TrackedRequest, pool: InstancePool, mask: np.ndarray) -> list[int]:
        """The slots to try in order, for a policy that ``fits_by_slack``."""
        slot = self.choose(req, pool, mask)
        return [] if slot is None else [slot]

    @abc.abstractmethod
    def choose(self, req: TrackedRequest, pool: InstancePool, mask: np.ndarray) -> int | None:
        """Slot for ``req`` among the ``mask``-ed instances, or None when none is allowed."""


dispatch_policies: Registry[type[DispatchPolicy]] = Registry("dispatch policy")
