"""``python -m dilaserve.eval frontier --hindsight``: the best static operating point in
hindsight against dilaserve, on one workload (docs/architecture.md, "The static frontier").

A static server picks a threshold, whether to refuse what cannot make its SLO, and a TP
mix, once. The grid runs every such point on the workload: each candidate threshold, with
admission on and off, on every static TP mix (every GPU at TP 1, 2 or 4 where the setting
allows it, and stage 1's plan for the workload's mean load); with SLO tiers, also one
threshold per tier (local search from the best uniform point with admission: every single
move, one tier to another threshold, the cluster to another mix or admission switched,
from the current point, repeated until no single move gains, quick or not). The best of
the grid by goodput is the frontier an adaptive policy is measured against: dilaserve's
margin is its goodput minus that point's. Quick runs keep admission off on TP-1 only in the
uniform grid (a static cluster without admission is the classic baseline), and run the
other mixes at TP-1's three best thresholds.

Runs go through a process pool (``--jobs``); each is a deterministic simulator run, so the
grid's numbers do not depend on the order or the parallelism.
"""

from __future__ import annotations

import logging
import multiprocessing
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from dilaserve.cluster.base import InstanceSpec
from dilaserve.control.operating_point import OperatingPoint
from dilaserve.eval.context import MIX_SUFFIX, EvalContext
from dilaserve.eval.workloads import trace_slo, trace_workload
from dilaserve.reconfig.monitor import WorkloadMonitor
from dilaserve.reconfig.plan import layout_from_node_counts, names_a_layout, node_counts_from_text, static_layout
from dilaserve.reconfig.reconfigurator import Reconfigurator
from dilaserve.schedule.policies import fixed_policy_name
from dilaserve.sim.metrics import good
from dilaserve.sim.progress import canvas_length
from dilaserve.sim.setting import ClusterSetting
from dilaserve.sim.simulator import SimResult
from dilaserve.sim.workload import Workload

#: The adaptive policies every hindsight run reports beside the grid.
ADAPTIVE = ("dilaserve", "dilaserve-no-reconfig")


@dataclass(frozen=True)
class GridPoint:
    """One static operating point: a threshold (or one per tier), admission, a TP mix."""

    threshold: float
    admission: bool
    mix: str
    #: Per-tier pins (None: every tier at ``threshold``).
    tiers: OperatingPoint | None = None

    @property
    def policy(self) -> str:
        base = fixed_policy_name(self.threshold)
        return f"{base}+admission" if self.admission else base

    @property
    def label(self) -> str:
        what = self.tiers.label if self.tiers is not None else self.policy
        if self.tiers is not None and self.admission:
            what += "+admission"
        return what if self.mix == "1" else f"{what}{MIX_SUFFIX}{self.mix}"


def mix_layout(setting: ClusterSetting, mix: str, wl: Workload, slo_s: float) -> tuple[InstanceSpec, ...] | None:
    """The static cluster of ``mix`` (``1``/``2``/``4``: every GPU at that TP degree;
    ``stage1``: stage 1's plan for ``wl``'s mean load; ``4,4,2+1+1,...``: those instances
    on each node), or None where the setting cannot run it (a TP degree it does not allow,
    or no feasible plan). An explicit layout the cluster cannot hold raises, saying why."""
    if names_a_layout(mix):
        return explicit_layout(setting, mix)
    if mix != "stage1":
        tp = int(mix)
        return tuple(static_layout(setting.cluster, tp)) if tp in setting.cluster.tp_degrees else None
    monitor = WorkloadMonitor(replace(setting.monitor, window_s=wl.duration_s + 1.0))
    for r in wl.requests:
        gen = canvas_length(r.output_tokens, setting.block_length)
        monitor.observe(r.arrival, r.prompt_tokens, gen, r.slo_s if r.slo_s is not None else slo_s)
    planner = Reconfigurator(setting.cluster, setting.profile, setting.reconfig, monitor)
    plan = planner.capacity_plan(monitor.classes(wl.duration_s))
    return None if plan is None else tuple(layout_from_node_counts(setting.cluster, plan.node_counts))


class LayoutError(ValueError):
    """A static cluster the setting cannot run (``--static-tp``): the message says why."""


def explicit_layout(setting: ClusterSetting, text: str) -> tuple[InstanceSpec, ...]:
    """The instances of ``text`` (one entry per node, e.g. ``4,4,4,2+1+1``) on the setting's cluster."""
    cluster, counts = setting.cluster, node_counts_from_text(text)
    bad = sorted({tp for node in counts for tp in node} - set(cluster.tp_degrees))
    if len(counts) != cluster.nodes or bad:
        raise LayoutError(
            f"layout {text!r} does not fit setting {setting.name!r}: it has {cluster.nodes} nodes of "
            f"{cluster.gpus_per_node} GPUs and TP degrees {list(cluster.tp_degrees)}"
            + (f" (not {bad})" if bad else f" (the layout lists {len(counts)} nodes)")
        )
    try:
        return tuple(layout_from_node_counts(cluster, counts))
    except ValueError as e:
        raise LayoutError(f"layout {text!r}: {e}") from None


def with_layout(setting: ClusterSetting, layout: Sequence[InstanceSpec] | None) -> ClusterSetting:
    return setting if layout is None else replace(setting, initial_layout=tuple(layout))


# Each pool worker rebuilds the context and the workload once (spawned, not forked: a
# forked polars or LightGBM thread pool can deadlock); a job names only its point.
_SHARED: dict = {}


def _init_worker(options, setting_name: str) -> None:
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    ctx = EvalContext(options)
    setting = ctx.setting(setting_name)
    wl = trace_workload(ctx, setting)
    _SHARED.update(ctx=ctx, setting=setting, wl=wl, slo=trace_slo(ctx, setting, wl))


def _run(job: tuple[str, str, tuple | None, OperatingPoint | None]) -> tuple[str, SimResult]:
    label, policy, layout, point = job
    ctx, setting, wl, slo = _SHARED["ctx"], _SHARED["setting"], _SHARED["wl"], _SHARED["slo"]
    st = with_layout(setting, layout)
    if point is not None:
        st = replace(st, control=replace(st.control, operating_point=point))
    t0 = time.perf_counter()
    res = ctx.simulator(st).run(policy, wl, slo)
    s = res.summary
    print(
        f"  [{setting.name}] {label:<44} goodput {s.goodput:6.1%}  attainment {s.slo_attainment:6.1%}  "
        f"quality {s.quality:.3f}  ({time.perf_counter() - t0:.0f}s wall)",
        file=sys.stderr,
        flush=True,
    )
    return label, replace(res, policy=label)


class GridRunner:
    """Runs labelled simulator jobs on one workload, ``jobs`` at a time. In parallel, the
    workload must be the trace experiments' own for the context's options (each worker
    rebuilds it from them); in-process (``jobs=1``) any workload runs."""

    def __init__(self, ctx: EvalContext, setting: ClusterSetting, wl: Workload, slo_s: float):
        _SHARED.update(ctx=ctx, setting=setting, wl=wl, slo=slo_s)
        self.jobs = ctx.options.jobs
        self.results: dict[str, SimResult] = {}

    def run(self, jobs: Sequence[tuple[str, str, tuple | None, OperatingPoint | None]]) -> None:
        todo = [j for j in jobs if j[0] not in self.results]
        if self.jobs == 1 or len(todo) == 1:
            done = map(_run, todo)
        else:
            ctx, setting = _SHARED["ctx"], _SHARED["setting"]
            pool = multiprocessing.get_context("spawn").Pool(
                min(self.jobs, len(todo)), _init_worker, (ctx.options, setting.name)
            )
            try:
                done = pool.map(_run, todo, chunksize=1)
            finally:
                pool.close()
                pool.join()
        self.results.update(dict(done))

    def goodput(self, label: str) -> float:
        return self.results[label].summary.goodput


#: Quick grids run the other TP mixes at this many of TP-1's best thresholds (with admission).
QUICK_MIX_THRESHOLDS = 3


def static_grid(
    thresholds: Sequence[float], mixes: Sequence[str], quick: bool, ranked: Sequence[float] | None = None
) -> list[GridPoint]:
    """The uniform points: threshold x admission x mix. Quick grids run admission off on
    TP-1 only, and the other mixes (admission on) at the ``QUICK_MIX_THRESHOLDS`` thresholds
    that did best on TP-1 (``ranked``, best first): the grid is then sized for minutes."""
    points = []
    for mix in mixes:
        for adm in (False, True):
            if quick and mix != "1":
                if not adm:
                    continue
                points.extend(GridPoint(t, adm, mix) for t in (ranked or thresholds)[:QUICK_MIX_THRESHOLDS])
            else:
                points.extend(GridPoint(t, adm, mix) for t in thresholds)
    return points


def _job(p: GridPoint, layouts: dict[str, tuple | None]):
    return (p.label, p.policy, layouts[p.mix], p.tiers)


def _moved(point: GridPoint, priority: int, threshold: float) -> GridPoint:
    """``point`` with one tier moved to ``threshold``. A pin equal to the default threshold
    is dropped, and a point with no pins left is the uniform one, so each operating point
    has one label (and one run)."""
    tiers = point.tiers or OperatingPoint.static(point.threshold)
    if threshold == tiers.default:
        tiers = replace(tiers, pins=tuple((p, t) for p, t in tiers.pins if p != priority))
    else:
        tiers = tiers.with_pin(priority, threshold)
    return replace(point, tiers=tiers if tiers.pins else None)


def _pin(point: GridPoint, priority: int) -> float:
    return point.threshold if point.tiers is None else point.tiers.pin(priority)


def single_moves(current: GridPoint, priorities: Sequence[int], thresholds: Sequence[float], mixes) -> list[GridPoint]:
    """Every point one move from ``current``: one tier to another threshold, the cluster to
    another static mix, or admission switched."""
    tiers = [_moved(current, p, t) for p in priorities for t in thresholds if _pin(current, p) != t]
    return [
        *tiers,
        *(replace(current, mix=m) for m in mixes if m != current.mix),
        replace(current, admission=not current.admission),
    ]


def tier_search(
    runner: GridRunner, start: GridPoint, priorities: Sequence[int], thresholds: Sequence[float], layouts
) -> tuple[GridPoint, int]:
    """Local search over one threshold per tier (and the mix and admission) from a uniform
    point: each pass runs every single move from the current point and keeps the best,
    until no single move gains. Each pass raises goodput strictly on a finite grid, so it
    ends. Returns the point and the number of passes."""
    current, passes = start, 0
    while True:
        passes += 1
        moves = single_moves(current, priorities, thresholds, layouts)
        runner.run([_job(m, layouts) for m in moves])
        top = max([current, *moves], key=lambda m: runner.goodput(m.label))  # ties keep current
        if top == current:
            return current, passes
        current = top


def tier_breakdown(requests: pl.DataFrame) -> dict[str, dict]:
    """Per SLO tier of a run's requests: its ``requests``, ``slo_attainment``, ``goodput``
    and ``p99_latency_s`` (over its finished requests; None if none finished)."""
    out = {}
    for tier in sorted(requests["tier"].drop_nulls().unique().to_list()):
        rows = requests.filter(pl.col("tier") == tier)
        lat = rows.filter(pl.col("status") == "finished")["latency_s"].to_numpy()
        out[tier] = {
            "requests": rows.height,
            "slo_attainment": float(rows["met_slo"].fill_null(False).mean()),
            "goodput": float(good(rows).mean()),
            "p99_latency_s": float(np.quantile(lat, 0.99)) if len(lat) else None,
        }
    return out


def hindsight(ctx: EvalContext, setting: ClusterSetting, wl: Workload, slo_s: float) -> dict:
    """The grid, dilaserve and its no-reconfiguration variant on ``wl``; returns the JSON
    section (``best_static``, ``dilaserve``, ``dilaserve-no-reconfig``, ``margin``, ``grid``)
    and keeps every run under ``_runs`` for the tables; every grid point's numbers are in
    the JSON line's ``policies``). With tiers, ``best_static``, ``dilaserve`` and
    ``dilaserve-no-reconfig`` carry ``tiers``: per tier, its attainment, goodput and p99.
    ``points_tried`` and ``search_passes`` say how far the search went, ``runs`` and
    ``wall_s`` what the verdict cost: the simulator runs it took and the wall seconds they
    took at ``--jobs``."""
    t0 = time.perf_counter()
    runner = GridRunner(ctx, setting, wl, slo_s)
    mixes = ("1", "2", "4", "stage1")
    layouts: dict[str, tuple | None] = {}
    for mix in mixes:
        lay = mix_layout(setting, mix, wl, slo_s)
        if lay is None:
            continue
        tps = sorted(s.tp for s in lay)
        if any(sorted(s.tp for s in other or static_layout(setting.cluster, 1)) == tps for other in layouts.values()):
            continue  # the same mix under another name (e.g. stage 1 planned all TP-1)
        layouts[mix] = None if mix == "1" else lay
    thresholds, quick = setting.control.thresholds, ctx.options.quick
    tp1 = static_grid(thresholds, ["1"], quick)
    runner.run([_job(p, layouts) for p in tp1] + [(name, name, None, None) for name in ADAPTIVE])
    ranked = sorted(thresholds, key=lambda t: -runner.goodput(GridPoint(t, True, "1").label))
    grid = tp1 + static_grid(thresholds, [m for m in layouts if m != "1"], quick, ranked)
    runner.run([_job(p, layouts) for p in grid])
    best = max(grid, key=lambda p: runner.goodput(p.label))
    priorities = sorted({r.priority for r in wl.requests}, reverse=True)
    if len(priorities) > 1:
        start = max((p for p in grid if p.admission), key=lambda p: runner.goodput(p.label))
        tiered, passes = tier_search(runner, start, priorities, setting.control.thresholds, layouts)
        best = max((best, tiered), key=lambda p: runner.goodput(p.label))  # ties keep the grid's
    else:
        passes = 0
    best_label = best.label
    res = runner.results

    def verdict_of(label: str) -> dict:
        tiers = {"tiers": tier_breakdown(res[label].requests)} if len(priorities) > 1 else {}
        return {**res[label].summary.as_json(), **tiers}

    top = res[best_label].summary
    static = {id(r) for label, r in res.items() if label not in ADAPTIVE}
    mixes_of = {m: (sorted(s.tp for s in lay) if lay else "all TP-1") for m, lay in layouts.items()}
    return {
        # The best static point names its TP mix (the grid's name for it, and its TP degrees).
        "best_static": {
            "policy": best_label,
            "mix": best.mix,
            "tp_degrees": mixes_of[best.mix],
            **verdict_of(best_label),
        },
        **{name: verdict_of(name) for name in ADAPTIVE},
        "margin": res["dilaserve"].summary.goodput - top.goodput,
        "mixes": mixes_of,
        # Where dilaserve's margin comes from: the point it ran at after each tuning.
        "dilaserve_tunings": [[round(t, 1), label] for t, label in res["dilaserve"].tunings],
        "runs": len({id(r) for r in res.values()}),
        # How far the search went: the static points it tried, and its passes to convergence.
        "points_tried": len(static),
        "search_passes": passes,
        "wall_s": round(time.perf_counter() - t0, 1),
        "_runs": res,
    }
