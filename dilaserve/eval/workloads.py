"""The workloads and SLOs the experiments run, shared by the experiments, the hindsight
grid's pool workers, the capacity search and the fidelity table (so none of those imports
another for them).

* :func:`trace_workload`: the real trace shaped into a low-load and a high-load phase.
* :func:`poisson_at`: Poisson arrivals with GSM8K-like lengths at a fraction of capacity.
* :func:`slo_at_scale` / :func:`trace_slo`: the SLO from the isolated latency of the
  setting's SLO law.
"""

from __future__ import annotations

from dilaserve.eval.context import TRACE_LOW_LOAD, EvalContext
from dilaserve.sim.arrivals import PhaseSpec, poisson_workload, shape_trace
from dilaserve.sim.lengths import GSM8K_OUTPUT_TOKENS, GSM8K_PROMPT_TOKENS
from dilaserve.sim.scenarios import named_workload
from dilaserve.sim.setting import ClusterSetting
from dilaserve.sim.slo import DEFAULT_SLO_SCALE, parse_slo_tiers, with_slo_tiers, workload_slo
from dilaserve.sim.workload import Workload


def slo_at_scale(ctx: EvalContext, setting: ClusterSetting, wl: Workload, scale: float) -> float:
    """The SLO from the isolated latency of the setting's SLO law, in its family."""
    table = ctx.slo_law_of(setting).table
    fixed = setting.control.fixed_threshold
    return workload_slo(wl, setting.profile, table, setting.block_length, fixed, scale, setting.block_causal)


def trace_slo(ctx: EvalContext, setting: ClusterSetting, wl: Workload) -> float:
    """The trace experiments' SLO for ``wl`` (the default scale)."""
    return slo_at_scale(ctx, setting, wl, DEFAULT_SLO_SCALE)


def trace_workload(
    ctx: EvalContext, setting: ClusterSetting, phase_s: float | None = None, high_load: float | None = None
) -> Workload:
    """The trace (with the setting's lengths, or ``--lengths``) shaped into a low-load then
    a high-load phase, ``phase_s`` each (default 1 h, 75 s in quick runs), at
    ``TRACE_LOW_LOAD`` and ``high_load`` (default: the setting's, or ``--high-load``) x the
    nominal capacity for those lengths; with ``--workload``, that workload's phases
    (:mod:`dilaserve.sim.scenarios`), its busiest at ``high_load`` where one is given
    (else at ``--high-load``, else its own), the others scaled with it."""
    tr = ctx.trace_for(setting)
    cap = ctx.capacity(setting, tr.prompt_tokens, tr.output_tokens)
    dur = phase_s or ctx.options.phase_s or (75.0 if ctx.options.quick else 3600.0)
    low, high = TRACE_LOW_LOAD * cap, (high_load or ctx.high_load_of(setting)) * cap
    phases = [PhaseSpec("low", dur, low), PhaseSpec("high", dur, high)]
    if ctx.options.workload is not None:  # its own rate curve and phase lengths
        named = named_workload(ctx.options.workload)
        # Its peak is its own unless the caller (a sweep's or a search's load) or --high-load names one.
        peak = high_load or ctx.options.high_load
        phases = named.phases(tr, cap, ctx.options.quick, phase_s or ctx.options.phase_s, peak)
    wl = shape_trace(tr, phases, name="trace")
    if ctx.options.tiers_text is None:
        return wl
    table = ctx.slo_law_of(setting).table
    fixed = setting.control.fixed_threshold
    tiers = parse_slo_tiers(ctx.options.tiers_text)
    return with_slo_tiers(
        wl, tiers, setting.profile, table, setting.block_length, fixed, setting.block_causal, ctx.options.seed
    )


def poisson_at(ctx: EvalContext, setting: ClusterSetting, load: float) -> Workload:
    """Poisson arrivals with GSM8K-like lengths at ``load`` x nominal capacity (30 s when
    quick, else 600 s)."""
    cap = ctx.capacity(setting, [GSM8K_PROMPT_TOKENS], [GSM8K_OUTPUT_TOKENS])
    dur = 30.0 if ctx.options.quick else 600.0
    return poisson_workload(load * cap, dur, "gsm8k", seed=ctx.options.seed, name="gsm8k")
