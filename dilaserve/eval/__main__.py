"""``python -m dilaserve.eval EXPERIMENT [--quick] [--json] [--trace PATH] ...``

``report`` writes docs/results.md from the runs recorded with ``--record NAME``
(:mod:`dilaserve.eval.results_doc`); ``rerecord [NAME ...]`` runs their recorded commands
again, writes the report and says which headline numbers moved
(:mod:`dilaserve.eval.rerecord`).

Experiments: ``trace``, ``rate-sweep``, ``slo-sweep``, ``ablation``, ``frontier``, ``all``
(every experiment but ``frontier``, which costs the trace once per load), and ``fidelity``
(every claim of the paper against ours on both step laws: results/fidelity/, and with
``--json`` one line ``{"claims": [{claim, paper, embedded, published, unit, why}],
"published_tokens_per_step": {...}}``; see :mod:`dilaserve.eval.fidelity`). Each writes
``results/<experiment>/`` (parquet tables, ``summary.md``, PNG plots) and prints the
markdown summary. With ``--json`` the last line printed is one JSON object
``{"policies": {NAME: {slo_attainment, slo_attainment_low, slo_attainment_high,
mean_latency_s, p99_latency_s, quality, mean_threshold, goodput, goodput_low,
goodput_high}}}``: every policy run, keyed by name for the first setting and
``NAME@SETTING`` for the others (goodput: share of all requests in time and correct). For
``rate-sweep`` and ``frontier`` a policy's numbers pool all requests of the sweep; for
``slo-sweep`` they are those at scale 5; for ``all``, the trace and ablation runs (the
sweeps are in their tables). ``frontier`` adds ``"frontier": {LOAD: {NAME: {...}}}``, the
same numbers per high-phase load. ``"policy_wall_s": {NAME: seconds}`` is each policy's
headline run's wall time (what a policy's control plane costs to simulate). ``trace`` (at
one load) and ``ablation`` with ``--seeds 0 1 2`` run each policy once per seed (``--jobs``
seeds at a time, each in its own process): its numbers pool the requests of those runs (and
its wall time sums theirs), and the line adds ``"seeds"`` and ``"per_seed": {SETTING: {NAME:
{"slo_attainment": [...], "goodput": [...], "goodput_high": [...]}}}``, each run's own, in
seed order.

``max-rate`` finds, per policy (``--policies``; default dilaserve and the static
policies), the highest rate of the trace's busiest phase it holds at ``--target`` (0.9) of
``--criterion`` (SLO attainment, or ``goodput`` over the quality at threshold 0.9), by a
bracketed search to within ``--rate-tol`` (one setting, the first
of ``--settings``; every workload flag of ``trace`` applies, ``--high-load`` is where the
search starts; a static policy may name its TP mix as the frontier labels it,
``"fixed@0.7+admission tp=4"``; ``--seeds 0 1 2`` pools each probe over seeds). With ``--json`` it ends with
``{"target", "criterion", "quality_ceiling", "seeds", "rates": {policy: rps},
"best_static": {"policy", "rate", ...}, "dilaserve": {"rate", "goodput", ...}, "ratio"}``
(:mod:`dilaserve.eval.max_rate`).

``capacity`` runs no simulation: per setting, the requests/s a static cluster of every
instance at one TP degree sustains at each candidate threshold, with the model's accuracy
there (what load control and reconfiguration can trade). With ``--json`` it ends with
``{"capacity": {SETTING: {"law", "lengths", "thresholds", "accuracy", "rps": {TP: [...]}}}}``
(:mod:`dilaserve.eval.capacity_table`).

``frontier --hindsight`` runs the static grid on the one trace workload instead (each
candidate threshold x admission on/off x static TP mix, and one threshold per tier by
a local search run until no single move gains, with ``--slo-tiers``;
:mod:`dilaserve.eval.hindsight`, in ``--jobs`` processes) and ends with ``{"policies":
{...every grid point...}, "best_static": {"policy", "mix", "tp_degrees", goodput, ...},
"dilaserve": {...},
"dilaserve-no-reconfig": {...}, "margin": dilaserve's goodput minus the best static
point's, "mixes": {...}, "dilaserve_tunings": [[time, point], ...], "runs": simulator
runs, "points_tried": static points run, "search_passes": passes of the tier search,
"wall_s": their wall time}``; with tiers, ``best_static`` and the two dilaserve entries
carry ``"tiers": {TIER: {requests, slo_attainment, goodput, p99_latency_s}}``. ``--slo-tiers
NAME:SHARE:SCALE[:FLOOR],...`` (or ``default``) gives the trace experiments tiered SLOs;
``--static-tp 1|2|4|stage1`` (or a layout per node, ``4,4,4,2+1+1``) starts every policy
from that cluster.

``audit`` runs one tuning policy (``--policies``, default dilaserve) on the trace workload
and replays each candidate of every tuning it adopted on the arrivals that came after it
(``--audit-horizon-s``, on ``--audit-sample`` of the cluster): the regret of each choice
against that future, and how far a switch's replayed lead over-promised. With ``--json``
it ends with ``{"policy", "setting", "seeds", "horizon_s", "sample", "summary":
{"tunings", "rises", "switches", "mean_regret", "mean_regret_rises",
"mean_regret_intervals", "mean_regret_held", "chose_oracle_best", "switch_overpromise"},
"tunings": [...]}``
(:mod:`dilaserve.eval.tuner_audit`).
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import time

from dilaserve.artifacts import MissingArtifactError, fingerprint
from dilaserve.eval import rerecord
from dilaserve.eval.capacity_table import capacity_table
from dilaserve.eval.context import SETTINGS, EvalContext, EvalOptions, split_mix
from dilaserve.eval.experiments import ALL_EXPERIMENTS, EXPERIMENTS
from dilaserve.eval.fidelity import run_fidelity
from dilaserve.eval.hindsight import LayoutError
from dilaserve.eval.max_rate import MaxRateError, max_rate
from dilaserve.eval.report import extra_json, policies_json, write
from dilaserve.eval.results_doc import RESULTS_DIR, record, write_report
from dilaserve.eval.tuner_audit import AuditError, tuner_audit
from dilaserve.sim.traces import TraceFormatError
from dilaserve.utils.cli import add_dataclass_arguments, build_dataclass, flag_error, values_for

#: The experiments ``--seeds`` pools: max-rate's probes, and each policy's run of trace and ablation.
SEEDED_EXPERIMENTS = ("max-rate", "trace", "ablation", "audit")
#: the experiments that answer for one setting (the first of ``--settings``)
ONE_SETTING = ("max-rate", "audit")


def parse(argv: list[str]) -> tuple[list[str], EvalOptions, bool, str | None]:
    ap = argparse.ArgumentParser(
        prog="python -m dilaserve.eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "experiment", choices=[*EXPERIMENTS, "all", "fidelity", "max-rate", "capacity", "audit", "report", "rerecord"]
    )
    ap.add_argument("--json", action="store_true", help="end with one JSON line of per-policy results")
    ap.add_argument(
        "--record",
        metavar="NAME",
        default=None,
        help="also store the JSON line, with this command, as docs/results/NAME.json (for `report`)",
    )
    # By hand: the default follows --quick.
    ap.add_argument(
        "--settings",
        nargs="+",
        choices=sorted(SETTINGS),
        default=None,
        help="settings: paper (LLaDA-8B on H100, analytic; ShareGPT lengths as the paper builds them; "
        "high phase at nominal capacity), paper-published (the same, replaying the step law "
        "calibrated to Fast-dLLM's published LLaDA numbers), block (the same cluster serving the "
        "block-causal checkpoint's recorded steps as block diffusion, LLaDA-8B's profile in block "
        "mode), paper-h200 (the paper setting on H200s with this project's eager engine: analytic, "
        "with host terms fitted to its steps measured on one H200), embedded (measured profile, the "
        "trace's own lengths, high phase 0.8); default: paper and embedded, or paper alone with --quick",
    )
    # Every other option is a field of EvalOptions, documented and validated there.
    add_dataclass_arguments(ap, EvalOptions)
    a = ap.parse_args(argv)
    values = values_for(EvalOptions, a)
    one = a.quick or a.experiment in ONE_SETTING  # these answer for one setting
    values["settings"] = tuple(a.settings) if a.settings else (("paper",) if one else ("paper", "embedded"))
    if a.experiment in ONE_SETTING and len(values["settings"]) > 1:
        ap.error(
            f"{a.experiment} runs one setting at a time: pass --settings with one of {' '.join(values['settings'])}"
        )
    try:
        opts = build_dataclass(EvalOptions, values)
    except (ValueError, TypeError) as e:
        ap.error(flag_error(EvalOptions, e))
    mixed = [p for p in opts.policies or () if split_mix(p)[1] is not None]
    if mixed and a.experiment != "max-rate":
        ap.error(
            f"--policies {' '.join(mixed)}: a policy on a named TP mix runs in max-rate; {a.experiment} starts every "
            "policy from one cluster, --static-tp"
        )
    if opts.seeds is not None and a.experiment not in SEEDED_EXPERIMENTS:
        ap.error(f"--seeds pools runs in {', '.join(SEEDED_EXPERIMENTS)}; {a.experiment} runs one seed: pass --seed")
    if opts.seeds is not None and a.experiment == "trace" and opts.high_load is None and opts.workload is None:
        ap.error("trace --seeds pools one load's runs: pass --high-load (e.g. --high-load 1.0) or --workload")
    names = list(ALL_EXPERIMENTS) if a.experiment == "all" else [a.experiment]
    return names, opts, a.json, a.record


def main(argv: list[str]) -> int:
    if argv[:1] == ["rerecord"]:
        return rerecord.main(argv[1:])  # its own flags: the recorded commands carry the rest
    names, opts, as_json, record_as = parse(argv)
    if names == ["report"]:
        print(f"wrote {write_report()} from {RESULTS_DIR}/*.json")
        return 0
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    ctx = EvalContext(opts)
    if names == ["fidelity"]:
        return _fidelity(ctx, as_json)
    if names == ["max-rate"]:
        return _one_document("max-rate", max_rate, ctx, as_json, record_as, argv)
    if names == ["capacity"]:
        return _one_document("capacity", capacity_table, ctx, as_json, record_as, argv)
    if names == ["audit"]:
        return _one_document("audit", tuner_audit, ctx, as_json, record_as, argv)
    policies: dict[str, dict] = {}
    extras: dict[str, dict] = {}
    walls: dict[str, float] = {}  # each policy's wall seconds (the headline runs)
    t0 = time.perf_counter()
    try:
        for name in names:
            print(f"running {name}{' (quick)' if opts.quick else ''} ...", file=sys.stderr, flush=True)
            out = EXPERIMENTS[name](ctx)
            text, _ = write(out, ctx)
            print(text, flush=True)
            if len(names) == 1 or name in ("trace", "ablation"):
                for k, v in policies_json(out).items():
                    policies.setdefault(k, v)
                walls.update({r.result.policy: round(r.result.wall_s, 1) for r in out.runs if r.headline})
            extras.update(extra_json(out))
    except (MissingArtifactError, TraceFormatError, LayoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    line = json.dumps({"policies": policies, **extras, "policy_wall_s": walls})
    if as_json:
        print(line)
    if record_as:
        args = shlex.join(argv)  # a policy on a named TP mix has a space: rerecord splits it back
        recorded = record(record_as, f"python -m dilaserve.eval {args}", line, artifacts=fingerprint(opts.artifacts))
        print(f"recorded {recorded}", file=sys.stderr)
    return 0


def _one_document(name: str, run, ctx: EvalContext, as_json: bool, record_as: str | None, argv: list[str]) -> int:
    """Run an experiment that makes one JSON document and its markdown (``run(ctx)``)."""
    print(f"running {name}{' (quick)' if ctx.options.quick else ''} ...", file=sys.stderr, flush=True)
    try:
        out, text = run(ctx)
    except (MissingArtifactError, TraceFormatError, LayoutError, MaxRateError, AuditError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text, flush=True)
    line = json.dumps(out)
    if as_json:
        print(line)
    if record_as:
        cmd = f"python -m dilaserve.eval {shlex.join(argv)}"
        print(f"recorded {record(record_as, cmd, line, artifacts=fingerprint(ctx.options.artifacts))}", file=sys.stderr)
    return 0


def _fidelity(ctx: EvalContext, as_json: bool) -> int:
    t0 = time.perf_counter()
    print(f"running fidelity{' (quick)' if ctx.options.quick else ''} ...", file=sys.stderr, flush=True)
    try:
        doc, text, folder = run_fidelity(ctx)
    except (MissingArtifactError, TraceFormatError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text, flush=True)
    print(f"wrote {folder}/fidelity.md, fidelity.json; done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if as_json:
        print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
