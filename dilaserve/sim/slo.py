"""SLOs: scale x the mean latency of a request alone on a TP-1 instance (docs/architecture.md section 6)."""

from __future__ import annotations

import numpy as np

from dilaserve.control.step_law import step_split
from dilaserve.engine.state import StepKind
from dilaserve.predict.replay import ReplayTable
from dilaserve.profile.types import LatencyProfile
from dilaserve.sim.progress import canvas_length
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
    block_causal: bool = False,
) -> float:
    """Expected seconds to decode one request alone, its expected steps split as the family
    prices them (:func:`~dilaserve.control.step_law.step_split`): bidirectional, one
    recompute step per block over its whole canvas and every other step a cache step over
    its block; block-causal, one prefill and every other step a block step (with appends)."""
    gen = canvas_length(output_tokens, block_length)
    steps = table.expected_steps(gen, block_length, threshold)
    split = step_split(steps, prompt_tokens, gen, block_length, block_causal)
    return split.seconds(profile.curve(tp, StepKind.CACHE), profile.curve(tp, StepKind.RECOMPUTE))


def mean_isolated_latency(
    workload: Workload,
    profile: LatencyProfile,
    table: ReplayTable,
    block_length: int,
    threshold: float,
    block_causal: bool = False,
) -> float:
    """Mean isolated TP-1 latency over the workload's requests, at ``threshold``."""
    if not len(workload):
        raise ValueError(f"workload {workload.name!r} is empty: no SLO can be derived from it")
    lat = [
        isolated_latency(profile, table, r.prompt_tokens, r.output_tokens, block_length, threshold, 1, block_causal)
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
    block_causal: bool = False,
) -> float:
    """One SLO for every request of the workload: ``scale`` x its mean isolated latency at
    ``threshold`` (the baselines' fixed threshold, the paper's default 0.9)."""
    if scale <= 0:
        raise ValueError(f"SLO scale {scale} must be positive (the paper sweeps 1 to 10, default 5)")
    return scale * mean_isolated_latency(workload, profile, table, block_length, threshold, block_causal)
