"""Dispatch policies: which instance a request goes to, among those the filters allow."""

from dilaserve.schedule.dispatch import least_tokens, lowest_latency, slack_fit  # noqa: F401  (registers)
from dilaserve.schedule.dispatch.base import DispatchPolicy, dispatch_policies

__all__ = ["DispatchPolicy", "dispatch_policies"]
