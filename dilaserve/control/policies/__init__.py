"""Threshold-policy pieces by name: selection, load control, admission."""

from dilaserve.control.policies import admission, load_control, selection  # noqa: F401  (registers)
from dilaserve.control.policies.base import (
    Admission,
    LoadControl,
    Outlook,
    Rejection,
    ThresholdSelection,
    admission_policies,
    load_controls,
    selection_policies,
)

__all__ = [
    "Admission",
    "LoadControl",
    "Outlook",
    "Rejection",
    "ThresholdSelection",
    "admission_policies",
    "load_controls",
    "selection_policies",
]
