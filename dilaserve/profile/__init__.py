"""Latency profiles per TP degree (measured, or analytic for real GPUs)."""

from dilaserve.profile.types import LatencyProfile, MissingTPDegreeError, StepCurve

__all__ = ["LatencyProfile", "MissingTPDegreeError", "StepCurve"]
