"""The experiments of ``python -m dilaserve.eval``: each returns its runs, labelled.

* ``trace``: the real trace shaped into a low-load and a high-load phase; dilaserve vs
  every static policy (infaas, llumnix, ``fixed@TAU`` at each candidate threshold), with
  the oracle bound; the high phase swept over ``TRACE_LOADS`` x nominal capacity (the
  setting's own load, e.g. 1.0 in the paper setting, is the headline), or run at
  ``--high-load`` alone when that is given.
* ``rate-sweep``: Poisson arrivals, GSM8K-like lengths, at rising request rates.
* ``slo-sweep``: one rate, SLO scale 1..10.
* ``ablation``: the trace with each of the paper's mechanisms switched off, each
  quality-aware piece added to the paper's algorithms, and each taken out of the default.
* ``frontier``: the trace at high-phase loads 0.6..1.4 x nominal capacity; per load, the
  static policies' attainment-quality frontier and where the adaptive policies land on it
  (an adaptive policy pays its way only above that frontier, docs/architecture.md).
  Not part of ``all``: it runs the trace experiment once per load.

The trace experiments take their request lengths and high-phase load from
:class:`~dilaserve.eval.context.EvalOptions` (``--lengths``, ``--high-load``).

Load levels are fractions of the cluster's nominal capacity at the baselines' threshold
(:func:`dilaserve.sim.capacity.nominal_capacity_rps`), so an experiment means the same on
every latency profile; the absolute rates are reported next to the results.
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

import polars as pl

from dilaserve.eval.context import EvalContext
from dilaserve.eval.hindsight import LayoutError, hindsight, mix_layout, with_layout
from dilaserve.eval.workloads import poisson_at, slo_at_scale, trace_slo, trace_workload
from dilaserve.schedule.policies import FIXED_ADMISSION_POLICIES, FIXED_POLICIES, VARIANTS
from dilaserve.sim.metrics import summarize
from dilaserve.sim.setting import ClusterSetting
from dilaserve.sim.simulator import SimResult
from dilaserve.sim.slo import DEFAULT_SLO_SCALE
from dilaserve.sim.workload import Phase, Workload

T = TypeVar("T")

#: The paper's algorithms with one mechanism off or one quality-aware piece added, then the
#: default with one piece taken out.
ABLATION_POLICIES = ("dilaserve-paper", *VARIANTS["dilaserve-paper"], "dilaserve", *VARIANTS["dilaserve"])
#: Fixed-threshold policies, without and with admission: together they trace the static
#: speed-quality frontier on the setting's cluster (``frontier --hindsight`` adds the TP mixes).
STATIC_POLICIES = ("infaas", "llumnix", *FIXED_POLICIES, *FIXED_ADMISSION_POLICIES)
#: Policies that pick thresholds per request, placed against the static frontier in the
#: trace and frontier experiments; list a dilaserve* variant here to add it.
ADAPTIVE_POLICIES = ("dilaserve", "dilaserve-paper", "oracle")
#: Every experiment but the ablation runs these: the static frontier and the adaptive policies.
TRACE_POLICIES = (*STATIC_POLICIES, *ADAPTIVE_POLICIES)

#: The trace experiment's high-phase loads, fractions of nominal capacity (full and quick alike).
TRACE_LOADS = (0.8, 1.0, 1.2, 1.4)
#: The frontier experiment's high-phase loads, fractions of nominal capacity (full, quick).
FRONTIER_LOADS = {False: (0.6, 0.8, 1.0, 1.2, 1.4), True: (0.6, 1.0, 1.4)}
RATE_LOADS = {False: (0.2, 0.4, 0.6, 0.8, 1.0, 1.2), True: (0.3, 0.7, 1.1)}
SLO_SCALES = {False: (1, 2, 3, 4, 5, 6, 8, 10), True: (1, 3, 5, 10)}
#: The slo-sweep's load, a fraction of nominal capacity.
SLO_SWEEP_LOAD = 0.7


@dataclass
class Run:
    """One policy on one workload: ``x`` is the swept value (rate or SLO scale), if any."""

    experiment: str
    setting: str
    result: SimResult
    workload: str
    rate: float
    slo_scale: float
    x: float | None = None
    phases: tuple[Phase, ...] = ()
    #: The run at the setting's own load, where an experiment also sweeps others (its
    #: findings, time-series plots and JSON ``policies`` use these runs).
    headline: bool = True


@dataclass
class ExperimentOutput:
    name: str
    runs: list[Run] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Sections of the JSON line beside ``policies`` (the hindsight frontier's verdict).
    extra: dict = field(default_factory=dict)


def static_mix(ctx: EvalContext, setting: ClusterSetting, wl: Workload, slo: float) -> ClusterSetting:
    """``setting`` starting from ``--static-tp``'s cluster (unchanged without it)."""
    mix = ctx.options.static_tp
    if mix is None:
        return setting
    layout = mix_layout(setting, mix, wl, slo)
    if layout is None:
        raise LayoutError(
            f"--static-tp {mix}: setting {setting.name!r} cannot run it (TP degrees {setting.cluster.tp_degrees}, "
            "or stage 1 found no plan for this load)"
        )
    return with_layout(setting, layout)


def _trace_runs(ctx: EvalContext, name: str, policies, high_loads: tuple[float, ...] | None = None) -> ExperimentOutput:
    """Every policy on the shaped trace, once per high-phase load (None: the setting's own
    load alone); every run's ``x`` is its load, and the run at the setting's own load is
    the headline. With ``--seeds`` each policy runs once per seed and its run is those runs
    pooled (:func:`pool_seeds`); ``extra["per_seed"]`` keeps each run's own numbers."""
    out = ExperimentOutput(name)
    seeds = ctx.options.run_seeds
    if len(seeds) > 1:
        out.extra = {"seeds": list(seeds), "per_seed": {}}
        out.notes.append(
            f"each policy's row pools its runs at seeds {', '.join(map(str, seeds))}, request by request "
            "(the time series are the first seed's)"
        )
    for setting_name, setting in zip(ctx.options.settings, ctx.settings):
        own = ctx.high_load_of(setting)
        loads = high_loads or (own,)
        for load in loads:
            # The setting's own load is a default: a named workload keeps its own peak there.
            at_load = load if high_loads else None
            first = ctx.with_seed(seeds[0])  # the run the notes and the row's rate describe
            wl = trace_workload(first, setting, high_load=at_load)
            slo = slo_at_scale(first, setting, wl, DEFAULT_SLO_SCALE)
            rates = ", ".join(f"{p.name} {p.rate:.1f} req/s" for p in wl.phases)
            law = ctx.law_of(setting).name
            out.notes.append(
                f"{setting.name} ({law} step law): {wl.meta['source']}, {len(wl)} requests, phases "
                f"{rates} (high {load:g} x nominal capacity); SLO {slo:.2f} s"
            )
            label = "" if len(loads) == 1 else f" high x{load:g}"
            jobs = [SeedJob(setting_name, tuple(policies), at_load, label, seed) for seed in seeds]
            runs_by_seed = run_seed_jobs(ctx, jobs)
            for results in zip(*runs_by_seed):
                res = results[0] if len(results) == 1 else pool_seeds(results, seeds)
                if len(results) > 1:
                    out.extra["per_seed"].setdefault(setting.name, {})[res.policy] = {
                        key: [getattr(r.summary, key) for r in results]
                        for key in ("slo_attainment", "goodput", "goodput_high")
                    }
                out.runs.append(
                    Run(
                        name,
                        setting.name,
                        res,
                        "trace",
                        wl.mean_rate,
                        DEFAULT_SLO_SCALE,
                        x=load,
                        phases=wl.phases,
                        headline=load == own,
                    )
                )
    return out


@dataclass(frozen=True)
class SeedJob:
    """One seed's runs of a trace experiment: every policy, on the workload ``seed`` draws."""

    #: the setting as ``--settings`` names it (a worker rebuilds it from the options)
    setting: str
    policies: tuple[str, ...]
    #: the busiest phase's load; None: the setting's own (or a named workload's)
    high_load: float | None
    label: str
    seed: int

    def run(self, ctx: EvalContext) -> list[SimResult]:
        at = ctx.with_seed(self.seed)
        setting = at.setting(self.setting)
        wl = trace_workload(at, setting, high_load=self.high_load)
        slo = slo_at_scale(at, setting, wl, DEFAULT_SLO_SCALE)
        seeded = f" seed {self.seed}" if len(ctx.options.run_seeds) > 1 else ""
        return at.run_policies(static_mix(at, setting, wl, slo), self.policies, wl, slo, self.label + seeded)


#: the context a seed worker rebuilt from the options (:func:`_init_seed_worker`)
_SEED_WORKER: dict[str, EvalContext] = {}


def _init_seed_worker(context: type[EvalContext], options) -> None:
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    _SEED_WORKER["ctx"] = context(options)


def _run_seed_job(job: SeedWork[T]) -> T:
    return job.run(_SEED_WORKER["ctx"])


class SeedWork(Protocol[T]):
    """One seed's work that a seed worker can run: it rebuilds what it needs from the context."""

    def run(self, ctx: EvalContext) -> T: ...


def run_seed_jobs(ctx: EvalContext, jobs: Sequence[SeedWork[T]]) -> list[T]:
    """Each job's results, in the jobs' order: ``--jobs`` seeds at a time, each in a process
    that rebuilds the context from its options (every run is deterministic, so the results
    are those of the runs one after the other; each run's wall time is then measured beside
    the others), or here where one job or one process is asked for."""
    workers = min(ctx.options.jobs, len(jobs))
    if workers <= 1:
        return [job.run(ctx) for job in jobs]
    pool = multiprocessing.get_context("spawn").Pool(workers, _init_seed_worker, (type(ctx), ctx.options))
    try:
        return pool.map(_run_seed_job, jobs, chunksize=1)
    finally:
        pool.close()
        pool.join()


def pool_seeds(results: Sequence[SimResult], seeds: Sequence[int]) -> SimResult:
    """One policy's runs at ``seeds`` as one run: every request of every run, each weighing
    alike (its id prefixed by its seed, ``s1/...``), and their summary; events, wall and
    simulated seconds, migrations and launches summed; tunings and failures of all runs;
    the time series of the first (runs at several seeds overlaid would read as one)."""
    requests = pl.concat(
        [
            r.requests.with_columns(pl.concat_str(pl.lit(f"s{seed}/"), pl.col("request_id")).alias("request_id"))
            for r, seed in zip(results, seeds)
        ]
    )
    return replace(
        results[0],
        requests=requests,
        summary=summarize(requests),
        events=sum(r.events for r in results),
        wall_s=sum(r.wall_s for r in results),
        sim_s=sum(r.sim_s for r in results),
        migrations=sum(r.migrations for r in results),
        reconfig_launches=sum(r.reconfig_launches for r in results),
        tunings=tuple(t for r in results for t in r.tunings),
        tuning_log=tuple(t for r in results for t in r.tuning_log),
        failures=tuple(f for r in results for f in r.failures),
    )


def trace(ctx: EvalContext) -> ExperimentOutput:
    """The trace at ``TRACE_LOADS`` (the setting's own load among them), or at ``--high-load``
    alone (a named workload, ``--workload``, runs at its own loads alone)."""
    loads = (
        None
        if ctx.options.high_load is not None or ctx.options.workload is not None
        else tuple(sorted({*TRACE_LOADS, *(ctx.high_load_of(s) for s in ctx.settings)}))
    )
    return _trace_runs(ctx, "trace", TRACE_POLICIES, loads)


def frontier(ctx: EvalContext) -> ExperimentOutput:
    if ctx.options.hindsight:
        return frontier_hindsight(ctx)
    return _trace_runs(ctx, "frontier", TRACE_POLICIES, FRONTIER_LOADS[ctx.options.quick])


def frontier_hindsight(ctx: EvalContext) -> ExperimentOutput:
    """The static grid against dilaserve on the one trace workload (:mod:`dilaserve.eval.hindsight`)."""
    out = ExperimentOutput("hindsight")
    for i, setting in enumerate(ctx.settings):
        wl = trace_workload(ctx, setting)
        slo = trace_slo(ctx, setting, wl)
        tiers = f"; SLO tiers {wl.meta['slo_tiers']}" if "slo_tiers" in wl.meta else ""
        out.notes.append(
            f"{setting.name} ({ctx.law_of(setting).name} step law): {wl.meta['source']}, {len(wl)} requests, "
            f"high {ctx.high_load_of(setting):g} x nominal capacity; SLO {slo:.2f} s{tiers}"
        )
        verdict = hindsight(ctx, setting, wl, slo)
        runs = verdict.pop("_runs")
        best = verdict["best_static"]["policy"]
        for label, res in runs.items():
            headline = label in ("dilaserve", best)
            out.runs.append(
                Run(
                    "hindsight",
                    setting.name,
                    res,
                    "trace",
                    wl.mean_rate,
                    DEFAULT_SLO_SCALE,
                    phases=wl.phases,
                    headline=headline,
                )
            )
        out.notes.append(
            f"{setting.name}: best static point in hindsight {best} "
            f"({verdict['best_static']['goodput']:.1%} goodput, on TP mix {verdict['best_static']['tp_degrees']}); "
            "dilaserve "
            f"{verdict['dilaserve']['goodput']:.1%} (margin {100 * verdict['margin']:+.1f} points), "
            f"without reconfiguration {verdict['dilaserve-no-reconfig']['goodput']:.1%}; "
            f"{verdict['points_tried']} static points tried"
            + (
                f", the per-tier search converged in {verdict['search_passes']} passes"
                if verdict["search_passes"]
                else ""
            )
        )
        for tier, d in verdict["dilaserve"].get("tiers", {}).items():
            b = verdict["best_static"]["tiers"][tier]
            out.notes.append(
                f"{setting.name}, tier {tier} ({d['requests']} requests), dilaserve against the best static point: "
                f"attainment {d['slo_attainment']:.1%} / {b['slo_attainment']:.1%}, goodput {d['goodput']:.1%} / "
                f"{b['goodput']:.1%}, p99 {_seconds(d['p99_latency_s'])} / {_seconds(b['p99_latency_s'])}"
            )
        key = "" if i == 0 else f"@{setting.name}"
        out.extra.update({f"{k}{key}": v for k, v in verdict.items()})
    return out


def _seconds(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f} s"


def ablation(ctx: EvalContext) -> ExperimentOutput:
    return _trace_runs(ctx, "ablation", ABLATION_POLICIES)


def rate_sweep(ctx: EvalContext) -> ExperimentOutput:
    out = ExperimentOutput("rate-sweep")
    for setting in ctx.settings:
        for load in RATE_LOADS[ctx.options.quick]:
            wl = poisson_at(ctx, setting, load)
            slo = slo_at_scale(ctx, setting, wl, DEFAULT_SLO_SCALE)
            rate = wl.meta["rate"]
            for res in ctx.run_policies(setting, TRACE_POLICIES, wl, slo, f" {rate:.1f} req/s"):
                out.runs.append(Run("rate-sweep", setting.name, res, "gsm8k", rate, DEFAULT_SLO_SCALE, x=rate))
        out.notes.append(
            f"{setting.name}: Poisson, GSM8K-like lengths (prompt 1020, output 256), loads "
            f"{RATE_LOADS[ctx.options.quick]} x nominal capacity"
        )
    return out


def slo_sweep(ctx: EvalContext) -> ExperimentOutput:
    out = ExperimentOutput("slo-sweep")
    for setting in ctx.settings:
        wl = poisson_at(ctx, setting, SLO_SWEEP_LOAD)
        for scale in SLO_SCALES[ctx.options.quick]:
            slo = slo_at_scale(ctx, setting, wl, scale)
            for res in ctx.run_policies(setting, TRACE_POLICIES, wl, slo, f" SLO x{scale}"):
                out.runs.append(Run("slo-sweep", setting.name, res, "gsm8k", wl.meta["rate"], scale, x=scale))
        out.notes.append(
            f"{setting.name}: Poisson at {wl.meta['rate']:.1f} req/s ({SLO_SWEEP_LOAD} x nominal "
            "capacity), GSM8K-like lengths"
        )
    return out


EXPERIMENTS: dict[str, Callable[[EvalContext], ExperimentOutput]] = {
    "trace": trace,
    "rate-sweep": rate_sweep,
    "slo-sweep": slo_sweep,
    "ablation": ablation,
    "frontier": frontier,
}
#: What ``all`` runs: the frontier is left out, as it costs the trace experiment once per
#: load (hours at full length); run it on its own.
ALL_EXPERIMENTS = ("trace", "rate-sweep", "slo-sweep", "ablation")
