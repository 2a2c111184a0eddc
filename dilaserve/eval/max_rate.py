"""``python -m dilaserve.eval max-rate``: capacity at an SLO, the metric peers report
(docs/architecture.md, "Capacity at an SLO").

For each policy, the highest arrival rate it holds at ``--target`` (0.9) of its
``--criterion``, and its goodput there. With ``attainment`` a rate is held where that share of
the requests met their SLO. A DLM's answers get worse as its threshold falls, so attainment
alone rewards a policy that answers fast and wrong; with ``goodput`` a rate is held where the
requests answered on time *and* correctly make that share of what the same requests would
get right at the baselines' threshold, 0.9 (the quality ceiling: the mean quality of
``fixed@0.9``'s answers in the busiest phase at the start load, one extra run). It is the
capacity at equal quality that serving systems with a fixed model output report. The workload is the trace experiments' own (every workload flag of
``trace`` applies); the search scales its busiest phase (``--high-load``, the high phase of
the shaped trace) and judges a rate by the requests that arrived in that phase, at that
rate: the low phase before it is the same at every probe and would only dilute the
verdict.

A static policy may name its own TP mix as ``frontier --hindsight`` labels it
(``fixed@0.7+admission tp=4``; ``tp=`` takes 1, 2, 4, ``stage1`` or a layout per node): it is
searched on that cluster, so on a workload where the mix matters the best static point is
not held to all TP-1. A named workload's (``--workload``) busiest phase runs at each
probe's load, and its other phases scale with it.

The search per policy (:class:`RateSearch`) starts at the setting's load (or
``--high-load``), steps by ``BRACKET_STEP`` up while the policy holds or down while it
misses until one load of each kind brackets the answer, then narrows the bracket by
interpolating attainment between its ends (kept inside the bracket's middle half, so a
bent curve still narrows it quickly) until the two ends are within ``--rate-tol`` of each
other. Runs are reused: policies that make the same run (``infaas`` is ``fixed@0.9``)
share one search, and every probe is run once. With ``--seeds`` a probe runs once per seed
and pools the busiest phase's requests of all of them: near a tuned policy's knee one
run's criterion moves by about a point with the timing of its tunings, so one run's held rate
is partly a draw. Runs go ``--jobs`` at a time (a probe's seeds side by side), each
policy's next probe as soon as its last one is back.

With ``--json`` the last line is ``{"target", "criterion", "quality_ceiling", "seeds", "rates": {policy: rps}, "best_static":
{"policy", "rate", "goodput", "attainment", "load"}, "dilaserve": {"rate", "goodput",
"attainment", "load"}, "ratio"}``: ``quality_ceiling`` None under ``attainment``, ``seeds``
the seeds each probe pooled, ``rates`` in requests/s of the busiest phase, ``load``
the same as a fraction of nominal capacity, ``goodput`` and ``attainment`` over that
phase's requests at that rate, ``ratio`` dilaserve's rate over the best static policy's
(None when no static policy holds any rate tried), and ``probes``: per policy every run of its
search, ``{"load", "rate", "attainment", "goodput"}`` in load order.

It also writes ``results/max-rate/`` (``--out``): ``summary.md``, ``max_rate.json`` (that
object) and ``max_rate.png``, each policy's criterion against the rate, with the target
and the rate each one holds marked.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import sys
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from dilaserve.eval.context import (
    EvalContext,
    is_static,
    resolve_policy,
    run_identity,
    split_mix,
    with_point,
)
from dilaserve.eval.experiments import STATIC_POLICIES, static_mix
from dilaserve.eval.hindsight import mix_layout, with_layout
from dilaserve.eval.plots import rate_search
from dilaserve.eval.workloads import trace_slo, trace_workload
from dilaserve.sim.metrics import good
from dilaserve.sim.setting import ClusterSetting

#: What ``max-rate`` searches without ``--policies``: dilaserve and the static policies.
DEFAULT_POLICIES = ("dilaserve", *STATIC_POLICIES)
#: The factor between probes until a bracket is found (up while the policy holds, down
#: while it misses).
BRACKET_STEP = 1.5
#: The loads (fractions of nominal capacity) the search stays within: a policy that misses
#: at the lowest holds no rate (0); one that holds at the highest is reported there.
MIN_LOAD, MAX_LOAD = 0.05, 8.0
#: Interpolated probes stay at least this share of the bracket away from either end: on a
#: cliff (attainment flat, then falling at once) interpolation alone would creep, so each
#: probe cuts at least a quarter. On made-up linear curves and cliffs this takes fewer
#: probes than plain bisection (tests/eval/test_max_rate.py).
SAFEGUARD = 0.25


class MaxRateError(ValueError):
    """A max-rate request that cannot be answered as asked: the message says how to fix it."""


@dataclass
class RateSearch:
    """The highest load at which one policy's attainment stays >= ``target``, to within a
    relative ``tol``. Feed it :meth:`observe`; :meth:`next_load` says where to probe next,
    or None when it is done. Attainment is taken to fall with load; where a run breaks
    that, the answer is the highest load held below the lowest load missed."""

    target: float
    tol: float
    start: float
    #: load -> attainment of every probe so far.
    probes: dict[float, float] = field(default_factory=dict)

    @property
    def missed(self) -> float | None:
        """The lowest load probed where attainment fell below the target."""
        return min((x for x, a in self.probes.items() if a < self.target), default=None)

    @property
    def held(self) -> float | None:
        """The highest load probed that held the target, below :attr:`missed`."""
        hi = self.missed
        ok = [x for x, a in self.probes.items() if a >= self.target and (hi is None or x < hi)]
        return max(ok, default=None)

    def observe(self, load: float, attainment: float) -> None:
        self.probes[load] = attainment

    def next_load(self) -> float | None:
        if not self.probes:
            return _rounded(self.start)
        lo, hi = self.held, self.missed
        if lo is None:
            down = hi / BRACKET_STEP
            return None if hi <= MIN_LOAD else _rounded(max(down, MIN_LOAD))
        if hi is None:
            return None if lo >= MAX_LOAD else _rounded(min(lo * BRACKET_STEP, MAX_LOAD))
        if hi / lo <= 1 + self.tol:
            return None
        a_lo, a_hi = self.probes[lo], self.probes[hi]
        x = lo + (a_lo - self.target) / (a_lo - a_hi) * (hi - lo)
        x = min(max(x, lo + SAFEGUARD * (hi - lo)), hi - SAFEGUARD * (hi - lo))
        # A probe within the tolerance of an end leaves a gap that costs one more run anyway:
        # probe one tolerance in from that end instead, so that either outcome ends the search.
        # (Rounded inwards: the ends' ratio after such a probe stays within the tolerance.)
        near_lo, near_hi = math.floor(lo * (1 + self.tol) * 1e4) / 1e4, math.ceil(hi / (1 + self.tol) * 1e4) / 1e4
        x = near_lo if x < near_lo else min(_rounded(x), near_hi)
        return None if x in self.probes else x  # a bracket narrower than the rounding


def _rounded(load: float) -> float:
    """Loads to four digits: equal loads of different policies share one workload."""
    return round(load, 4)


@dataclass(frozen=True)
class Probe:
    """One policy at one load: the busiest phase's rate, attainment and goodput."""

    policy: str
    load: float
    rate_rps: float
    attainment: float
    goodput: float
    #: mean quality of the phase's finished requests (NaN where none finished)
    quality: float = float("nan")

    def score(self, criterion: str, ceiling: float | None) -> float:
        """What the search holds at the target: attainment, or goodput over the quality
        ceiling (see the module docstring)."""
        return self.attainment if criterion == "attainment" else self.goodput / ceiling


#: The threshold whose answers make the quality ceiling of ``--criterion goodput``.
CEILING_POLICY = "fixed@0.9"


# The state of the process that runs probes: the context, the setting and the workloads
# built so far, by load (a pool worker builds its own from the options).
_STATE: dict = {}


def _init_worker(options, setting_name: str) -> None:
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    ctx = EvalContext(options)
    _STATE.update(ctx=ctx, setting=ctx.setting(setting_name), workloads={})


@dataclass(frozen=True)
class _Tally:
    """One run's busiest phase in sums, so that runs at several seeds pool request by request."""

    rate_rps: float
    requests: int
    met: int
    good: float
    #: quality summed over the phase's finished requests, and how many finished
    quality: float
    finished: int


def _run(policy: str, load: float, seed: int) -> _Tally:
    """``policy`` at ``load`` on the workload ``seed`` draws: its busiest phase."""
    ctx, setting, cache = _STATE["ctx"].with_seed(seed), _STATE["setting"], _STATE["workloads"]
    if (seed, load) not in cache:
        wl = trace_workload(ctx, setting, high_load=load)
        slo = trace_slo(ctx, setting, wl)
        cache[seed, load] = wl, slo, static_mix(ctx, setting, wl, slo)
    wl, slo, st = cache[seed, load]
    t0 = time.perf_counter()
    name, mix = split_mix(policy)
    if mix is not None:  # a static point on its own TP mix, as the frontier names it
        layout = mix_layout(setting, mix, wl, slo)
        if layout is None:
            raise MaxRateError(
                f"policy {policy!r}: setting {setting.name!r} cannot run TP mix {mix!r} at load {load:g} "
                f"(TP degrees {list(setting.cluster.tp_degrees)}, or stage 1 found no plan); drop it from --policies"
            )
        st = with_layout(setting, layout)
    base, point = resolve_policy(name)
    res = ctx.simulator(with_point(st, point)).run(base, wl, slo)
    peak = max(wl.phases, key=lambda p: p.rate) if wl.phases else None
    rows = res.requests if peak is None else res.requests.filter(pl.col("phase") == peak.name)
    done = rows.filter(pl.col("status") == "finished")["quality"].drop_nulls()
    t = _Tally(
        wl.mean_rate if peak is None else peak.rate,
        len(rows),
        int(rows["met_slo"].fill_null(False).sum()),
        float(good(rows).sum()),
        float(done.sum()),
        len(done),
    )
    seeded = f" seed {seed}" if len(ctx.options.run_seeds) > 1 else ""
    print(
        f"  [{setting.name}] {policy:<28} load {load:6.3f} ({t.rate_rps:6.1f} req/s){seeded}  attainment "
        f"{t.met / max(t.requests, 1):6.1%}  goodput {t.good / max(t.requests, 1):6.1%}  "
        f"({time.perf_counter() - t0:.0f}s wall)",
        file=sys.stderr,
        flush=True,
    )
    return t


def _pooled(policy: str, load: float, tallies: Sequence[_Tally]) -> Probe:
    """One probe from its runs at every seed: the busiest phases' requests pooled, at their mean rate."""
    n = sum(t.requests for t in tallies)
    finished = sum(t.finished for t in tallies)
    return Probe(
        policy,
        load,
        sum(t.rate_rps for t in tallies) / len(tallies),
        sum(t.met for t in tallies) / n if n else float("nan"),
        sum(t.good for t in tallies) / n if n else float("nan"),
        sum(t.quality for t in tallies) / finished if finished else float("nan"),
    )


def _probe(policy: str, load: float) -> Probe:
    """``policy`` at ``load``, at every seed of ``--seeds``, one after the other (in this process)."""
    seeds = _STATE["ctx"].options.run_seeds
    return _pooled(policy, load, [_run(policy, load, s) for s in seeds])


class _Inline:
    """Runs each probe where it is submitted (``--jobs 1``, or a context a worker cannot
    rebuild from its options): the executor interface, done at once."""

    def submit(self, fn, *args) -> Future:
        f: Future = Future()
        f.set_result(fn(*args))
        return f

    def shutdown(self, **_) -> None:
        pass


def quality_ceiling(ctx: EvalContext, setting: ClusterSetting) -> float:
    """The mean quality of :data:`CEILING_POLICY`'s answers in the busiest phase at the
    search's start load: what ``--criterion goodput`` holds a share of."""
    _STATE.update(ctx=ctx, setting=setting, workloads={})
    q = _probe(CEILING_POLICY, _rounded(ctx.high_load_of(setting))).quality
    if not q > 0:
        raise MaxRateError(
            f"--criterion goodput: {CEILING_POLICY} finished no request of the busiest phase at the start load "
            f"{ctx.high_load_of(setting):g}, so there is no quality ceiling; pass a lower --high-load"
        )
    return q


def search_rates(
    ctx: EvalContext, setting: ClusterSetting, policies: Sequence[str], ceiling: float | None = None
) -> dict[str, list[Probe]]:
    """Every probe of every policy's search, by policy (policies that make the same run
    share one search, and its probes); ``ceiling``: the quality ceiling under
    ``--criterion goodput``."""
    criterion = ctx.options.criterion
    groups: dict[tuple, list[str]] = {}
    for name in policies:
        policy, mix = split_mix(name)
        groups.setdefault((run_identity(policy, setting), mix), []).append(name)
    searches = {
        names[0]: RateSearch(ctx.options.target, ctx.options.rate_tol, ctx.high_load_of(setting))
        for names in groups.values()
    }
    probes: dict[str, list[Probe]] = {name: [] for name in searches}
    _STATE.update(ctx=ctx, setting=setting, workloads={})
    jobs = min(ctx.options.jobs, len(searches))
    pool = (
        _Inline()
        if jobs == 1
        else ProcessPoolExecutor(jobs, multiprocessing.get_context("spawn"), _init_worker, (ctx.options, setting.name))
    )
    # One run per seed of each probe, each its own job, so the seeds of a long probe run
    # side by side; a probe is observed once all its seeds are back.
    seeds = ctx.options.run_seeds
    pending: dict[Future, tuple[str, float, int]] = {}
    back: dict[tuple[str, float], dict[int, _Tally]] = {}

    def submit(name: str) -> None:
        load = searches[name].next_load()
        if load is not None:
            back[name, load] = {}
            for seed in seeds:
                pending[pool.submit(_run, name, load, seed)] = (name, load, seed)

    try:
        for name in sorted(searches, key=is_static):  # adaptive policies first: their runs are the longest
            submit(name)
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                name, load, seed = pending.pop(f)
                runs = back[name, load]
                runs[seed] = f.result()
                if len(runs) < len(seeds):
                    continue
                p = _pooled(name, load, [runs[s] for s in seeds])  # in seed order: the same sums every time
                del back[name, load]
                probes[name].append(p)
                searches[name].observe(p.load, p.score(criterion, ceiling))
                submit(name)
    except BaseException:  # an error or Ctrl-C: drop the probes not started, wait for none
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return {name: probes[names[0]] for names in groups.values() for name in names}


def _at_max(probes: list[Probe], target: float, criterion: str, ceiling: float | None) -> Probe | None:
    """The probe at the highest load held (below the lowest missed), or None."""
    search = RateSearch(target, 0.0, 0.0, {p.load: p.score(criterion, ceiling) for p in probes})
    return next((p for p in probes if p.load == search.held), None)


def max_rate(ctx: EvalContext) -> tuple[dict, str]:
    """The search on the first setting: the JSON object and a markdown summary."""
    names = ctx.options.policies or DEFAULT_POLICIES
    if "dilaserve" not in names or not any(is_static(n) for n in names):
        raise MaxRateError(
            f"max-rate compares dilaserve with the best static policy: --policies {' '.join(names)} must list "
            "dilaserve and at least one static policy (infaas, llumnix, fixed@TAU, fixed@TAU+admission, or one "
            "threshold per tier as frontier --hindsight names it, tiers(2:0.8,*:0.7)+admission)"
        )
    setting = ctx.settings[0]
    t0 = time.perf_counter()
    criterion, target = ctx.options.criterion, ctx.options.target
    ceiling = quality_ceiling(ctx, setting) if criterion == "goodput" else None
    probes = search_rates(ctx, setting, names, ceiling)
    top = {name: _at_max(ps, target, criterion, ceiling) for name, ps in probes.items()}

    def point(p: Probe | None) -> dict:
        if p is None:
            return {"rate": 0.0, "goodput": None, "attainment": None, "load": None}
        return {"rate": p.rate_rps, "goodput": p.goodput, "attainment": p.attainment, "load": p.load}

    rates = {name: point(p)["rate"] for name, p in top.items()}
    best = max((n for n in names if is_static(n)), key=lambda n: rates[n])
    d = point(top["dilaserve"])
    out = {
        "target": target,
        "criterion": criterion,
        "quality_ceiling": ceiling,
        "seeds": list(ctx.options.run_seeds),
        "rates": rates,
        "best_static": {"policy": best, **point(top[best])},
        "dilaserve": d,
        "ratio": d["rate"] / rates[best] if rates[best] > 0 else None,
        "probes": {
            name: [
                {"load": p.load, "rate": p.rate_rps, "attainment": p.attainment, "goodput": p.goodput}
                for p in sorted(ps, key=lambda q: q.load)
            ]
            for name, ps in probes.items()
        },
    }
    # shared searches once, each probe once per seed
    runs = len(ctx.options.run_seeds) * sum(len(ps) for ps in {id(ps): ps for ps in probes.values()}.values())
    text = _summary(setting, out, top, probes, runs, time.perf_counter() - t0)
    _write(Path(ctx.options.out) / "max-rate", out, text, probes, ceiling)
    return out, text


def _write(folder: Path, out: dict, text: str, probes: dict[str, list[Probe]], ceiling: float | None) -> None:
    """summary.md, max_rate.json and max_rate.png in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.md").write_text(text + "\n")
    (folder / "max_rate.json").write_text(json.dumps(out, indent=1))
    criterion = out["criterion"]
    ylabel = "SLO attainment (%)" if criterion == "attainment" else f"goodput (% of the quality ceiling, {ceiling:.1%})"
    rate_search(
        {name: [(p.rate_rps, p.score(criterion, ceiling)) for p in ps] for name, ps in probes.items()},
        out["rates"],
        out["target"],
        ylabel,
        folder / "max_rate.png",
    )


def _summary(setting, out: dict, top: dict, probes: dict[str, list[Probe]], runs: int, wall_s: float) -> str:
    criterion, ceiling = out["criterion"], out["quality_ceiling"]
    held = "SLO attainment" if criterion == "attainment" else f"goodput over the quality ceiling ({ceiling:.1%})"
    lines = [
        f"# max-rate: the highest rate held at {out['target']:.0%} {held} ({setting.name})",
        "",
        f"| policy | rate (req/s) | load (x capacity) | attainment there | goodput there | probes ({criterion}) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in sorted(top, key=lambda n: -out["rates"][n]):
        p = top[name]
        tried = ", ".join(
            f"{q.load:g}: {q.score(criterion, ceiling):.1%}" for q in sorted(probes[name], key=lambda q: q.load)
        )
        cells = ["–"] * 3 if p is None else [f"{p.load:.3f}", f"{p.attainment:.1%}", f"{p.goodput:.1%}"]
        lines.append(f"| {name} | {out['rates'][name]:.1f} | " + " | ".join(cells) + f" | {tried} |")
    ratio = "–" if out["ratio"] is None else f"{out['ratio']:.2f}x"
    lines += [
        "",
        f"dilaserve holds {out['dilaserve']['rate']:.1f} req/s; the best static policy, "
        f"{out['best_static']['policy']}, {out['best_static']['rate']:.1f} req/s (ratio {ratio}). "
        f"{runs} simulator runs, {wall_s:.0f} s wall"
        + (f"; each probe pools seeds {', '.join(map(str, out['seeds']))}." if len(out["seeds"]) > 1 else "."),
    ]
    return "\n".join(lines)
