"""Latency profile lookups."""

from __future__ import annotations

from dilaserve.engine.state import StepKind
from dilaserve.profile.types import LatencyProfile, StepCurve


def test_a_step_kind_given_by_its_value_reads_the_same_curve_as_the_member():
    profile = LatencyProfile("p", {1: StepCurve((1.0,), (0.5,))}, {1: StepCurve((1.0,), (0.1,))})
    assert profile.latency(1, 1.0, StepKind.CACHE) == profile.latency(1, 1.0, "cache") == 0.1
    assert profile.latency(1, 1.0, "recompute") == profile.latency(1, 1.0) == 0.5
