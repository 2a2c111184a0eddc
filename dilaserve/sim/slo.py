"""SLOs: scale x the mean latency of a request alone on a TP-1 instance (docs/architecture.md section 6)."""

from __future__ import annotations

import numpy as np

from dilaserve.engine.state import StepKind
from dilaserve.profile.types import LatencyProfile
from dilaserve.sim.progress import canvas_length
from dilaserve.sim.replay import ReplayTable
from dilaserve.sim.workload import Workload

DEFAULT_SLO_SCALE = 5.0


def isolated_latency(
    profile: LatencyProfile,
    table: ReplayTable,
    prompt_tokens: int,
    output_tokens: int,
    block_length: int,
    threshold: float,
    tp: int = 1,
) -> float:
    """Expected seconds to decode one request alone: one recompute step per block over its
    whole canvas, every other step a cache step over its block."""
    gen = canvas_length(output_tokens, block_length)
    blocks = gen // block_length
    steps = table.expected_steps(gen, block_length, threshold)
    return blocks * profile.latency(tp, prompt_tokens + gen, StepKind.RECOMPUTE) + max(
        steps - blocks, 0.0
    ) * profile.latency(tp, block_length, StepKind.CACHE)


def mean_isolated_latency(
    workload: Workload, profile: LatencyProfile, table: ReplayTable, block_length: int, threshold: float
) -> float:
    """Mean isolated TP-1 latency over the workload's requests, at ``threshold``."""
    if not len(workload):
        raise ValueError(f"workload {workload.name!r} is empty: no SLO can be derived from it")
    lat = [
        isolated_latency(profile, table, r.prompt_tokens, r.output_tokens, block_length, threshold)
        for r in workload.requests
    ]
    return float(np.mean(lat))


def workload_slo(
    workload: Workload,
    profile: LatencyProfile,
    table: ReplayTable,
    block_length: int,
    threshold: float,
    scale: float = DEFAULT_SLO_SCALE,
) -> float:
    """One SLO for every request of the workload: ``scale`` x its mean isolated latency at
    ``threshold`` (the baselines' fixed threshold, the paper's default 0.9)."""
    if scale <= 0:
        raise ValueError(f"SLO scale {scale} must be positive (the paper sweeps 1 to 10, default 5)")
    return scale * mean_isolated_latency(workload, profile, table, block_length, threshold)
