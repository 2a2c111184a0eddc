"""Threshold selection (SLO-aware) and adaptive load control (docs/architecture.md section 5)."""

from dilaserve.control.cap_walk import cap_thresholds
from dilaserve.control.config import ControlConfig
from dilaserve.control.controller import ThresholdController
from dilaserve.control.cost_model import CapacityModel, RequestShape, remaining_time, request_load, split_cost
from dilaserve.control.predictions import PredictionCache
from dilaserve.control.request import TrackedRequest
from dilaserve.control.thresholds import walk_thresholds

__all__ = [
    "CapacityModel",
    "ControlConfig",
    "PredictionCache",
    "RequestShape",
    "ThresholdController",
    "TrackedRequest",
    "cap_thresholds",
    "remaining_time",
    "request_load",
    "split_cost",
    "walk_thresholds",
]
