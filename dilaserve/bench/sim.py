"""Simulator throughput: ``python -m dilaserve.bench sim [--json] [--phase-s S] [--policy P]``.

Runs the trace experiment's workload on the paper's 16-GPU cluster (4 nodes x 4, TP
{1, 2, 4}, analytic LLaDA-8B on H100) in replay mode and reports ``sim_speedup``
(simulated seconds per wall second; the full 2-hour trace needs >= 12 to finish within
10 minutes) and ``events_per_s`` (simulator events per wall second). By default each load
phase is shortened to ``--phase-s`` seconds, which keeps the low/high-load mix of the
full run; ``--phase-s 3600`` simulates the full compressed trace.

Both rates are wall-clock measurements, so a busy machine lowers them: the run is repeated
``--repeats`` times and each rate is the median, with ``sim_speedup_spread`` and
``events_per_s_spread`` (max - min over the repetitions). The simulated outcome is the same
every time (one seed); only the wall time varies.
"""

from __future__ import annotations

import argparse
import logging
import statistics

from dilaserve.bench.common import emit, machine_info
from dilaserve.eval.context import EvalContext, EvalOptions
from dilaserve.eval.experiments import trace_workload
from dilaserve.sim.slo import DEFAULT_SLO_SCALE, workload_slo

TARGET_SPEEDUP = 12.0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m dilaserve.bench sim")
    ap.add_argument("--json", action="store_true", help="print only the JSON result line")
    ap.add_argument("--phase-s", type=float, default=150.0, help="simulated seconds per load phase (full run: 3600)")
    ap.add_argument("--policy", default="dilaserve", help="policy to simulate (default: dilaserve)")
    ap.add_argument("--repeats", type=int, default=3, help="runs to take the median wall-clock rates over")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    ctx = EvalContext(EvalOptions(settings=("paper",)))
    setting = ctx.setting("paper")
    wl = trace_workload(ctx, setting, phase_s=args.phase_s)
    slo = workload_slo(
        wl, setting.profile, ctx.table, setting.block_length, setting.control.fixed_threshold, DEFAULT_SLO_SCALE
    )
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    runs = [ctx.simulator(setting).run(args.policy, wl, slo) for _ in range(args.repeats)]
    speedups, rates = [r.sim_speedup for r in runs], [r.events / r.wall_s for r in runs]
    res = runs[0]
    result = {
        "sim_speedup": round(statistics.median(speedups), 2),
        "sim_speedup_spread": round(max(speedups) - min(speedups), 2),
        "events_per_s": round(statistics.median(rates), 1),
        "events_per_s_spread": round(max(rates) - min(rates), 1),
        "repetitions": args.repeats,
        "target_speedup": TARGET_SPEEDUP,
        "policy": res.policy,
        "requests": len(wl),
        "sim_s": round(res.sim_s, 1),
        "wall_s": round(statistics.median(r.wall_s for r in runs), 1),
        "events": res.events,
        "phases": {p.name: round(p.rate, 2) for p in wl.phases},
        "slo_attainment": round(res.summary.slo_attainment, 4),
        "machine": machine_info(),
    }
    emit(result, args.json)
    return 0
