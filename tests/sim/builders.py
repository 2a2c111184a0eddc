"""Tiny, hand-made simulator inputs: step dynamics, a quality table, profiles, settings."""

from __future__ import annotations

import polars as pl

from dilaserve.control.thresholds import CANDIDATE_THRESHOLDS
from dilaserve.predict.base import OneShotPredictor
from dilaserve.predict.dynamics import StepDynamics
from dilaserve.predict.quality import FixedRow, MixedRow, ThresholdQuality
from dilaserve.predict.replay import ReplayTable
from dilaserve.predict.rollouts import STEP_CONF_COLUMNS
from dilaserve.profile.types import LatencyProfile, StepCurve
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.schedule.policies import get_policy
from dilaserve.sim.arrivals import PhaseSpec, shape_trace
from dilaserve.sim.capacity import nominal_capacity_rps
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.setting import ClusterSetting, Predictors, with_dynamics
from dilaserve.sim.simulator import SimConfig
from dilaserve.sim.slo import workload_slo
from dilaserve.sim.traces import load_trace
from dilaserve.sim.window_replay import WindowReplay
from dilaserve.sim.workload import Workload

THRESHOLDS = CANDIDATE_THRESHOLDS


def dynamics(tokens: dict[float, list[int]], n_buckets: int = 1) -> StepDynamics:
    """Step dynamics whose steps at threshold ``t`` commit the listed token counts (any bucket)."""
    rows = []
    for t, ks in tokens.items():
        for b in range(n_buckets):
            for k in ks:
                rows.append(
                    {
                        "threshold": t,
                        "bucket": b,
                        "block_length": 32,
                        "step_kind": "cache",
                        "tokens_committed": k,
                        **{c: t for c in STEP_CONF_COLUMNS},
                    }
                )
    return StepDynamics(pl.DataFrame(rows), n_buckets)


def varied_dynamics() -> StepDynamics:
    """More tokens per step at lower thresholds, with spread."""
    return dynamics({t: [max(1, round(k * (1.5 - t) * 2)) for k in (1, 2, 3, 4)] for t in THRESHOLDS}, n_buckets=2)


def quality() -> ThresholdQuality:
    fixed = [FixedRow(t, 0.5 + 0.5 * t, 10.0, 0.5, 10) for t in THRESHOLDS]
    return ThresholdQuality(fixed, MixedRow(THRESHOLDS, 0.8, 10.0, 0.7, 0.85, 10))


def linear_profile(per_token: dict[int, float], base: float = 0.01, cache_base: float = 0.005) -> LatencyProfile:
    """LP(n) = base + a n (recompute), cache_base + a n (cache), over 1..1e6 tokens."""
    pts = (1, 1_000_000)
    rec = {d: StepCurve.from_points((n, base + a * n) for n in pts) for d, a in per_token.items()}
    cac = {d: StepCurve.from_points((n, cache_base + a * n) for n in pts) for d, a in per_token.items()}
    return LatencyProfile("linear", rec, cac)


def small_setting(dyn: StepDynamics, nodes: int = 1, tp_degrees=(1, 2, 4)) -> ClusterSetting:
    profile = linear_profile({1: 2e-5, 2: 1.5e-5, 4: 0.9e-5})
    return with_dynamics(
        ClusterSetting("small", profile, ClusterConfig(nodes=nodes, gpus_per_node=4, tp_degrees=tp_degrees)), dyn
    )


def predictors(table: ReplayTable) -> Predictors:
    spt = {t: table.block_steps(t, 32)[0] / 32 for t in THRESHOLDS}
    return Predictors(learned=OneShotPredictor(spt), oneshot=OneShotPredictor(spt))


def tp1_dilaserve_replay():
    """The dilaserve window replay on one node of TP-1 instances over :func:`varied_dynamics`,
    and its setting: the cluster the replay tests overload."""
    dyn = varied_dynamics()
    table = ReplayTable(dyn)
    setting = small_setting(dyn, tp_degrees=(1,))
    replay = WindowReplay(
        setting, ReplayProgress(table, quality()), predictors(table), SimConfig(), get_policy("dilaserve")
    )
    return replay, setting


def trace_case(phases: list[tuple[str, float, float]]):
    """``(table, setting, workload, slo)``: the shipped trace shaped into ``phases`` (name,
    seconds, load as a fraction of the :func:`small_setting` cluster's nominal capacity at
    0.9) over :func:`varied_dynamics`, every request at 3x the mean isolated latency."""
    dyn = varied_dynamics()
    table = ReplayTable(dyn)
    setting = small_setting(dyn)  # 4 GPUs, TP {1, 2, 4}
    tr = load_trace()
    cap = nominal_capacity_rps(setting, table, tr.prompt_tokens, tr.output_tokens, 0.9)
    wl: Workload = shape_trace(tr, [PhaseSpec(name, seconds, load * cap) for name, seconds, load in phases])
    slo = workload_slo(wl, setting.profile, table, 32, 0.9, scale=3)
    return table, setting, wl, slo
