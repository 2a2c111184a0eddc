from __future__ import annotations

import abc

import numpy as np

from dilaserve.control.request import TrackedRequest
from dilaserve.schedule.pool import InstancePool
from dilaserve.utils.registry import Registry


class InstanceFilter(abc.ABC):
    """Masks the instances a request may be placed on."""

    @abc.abstractmethod
    def mask(self, req: TrackedRequest, pool: InstancePool) -> np.ndarray: ...


instance_filters: Registry[type[InstanceFilter]] = Registry("instance filter")
