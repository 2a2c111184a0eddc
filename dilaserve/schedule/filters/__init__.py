"""Instance filters: which instances may take a request.

Kept apart from dispatch policies so a policy only ranks the instances that pass.
"""

from dilaserve.schedule.filters import batch_room  # noqa: F401  (registers)
from dilaserve.schedule.filters.base import InstanceFilter, instance_filters

__all__ = ["InstanceFilter", "instance_filters"]
