"""How good were the tuner's choices? Each tuning against the arrivals that came after it.

``python -m dilaserve.eval audit [--quick] [workload flags] [--seeds 0 1 2] [--json]``
runs a tuning policy (``--policies``, default ``dilaserve``) on the trace workload, then,
for every tuning it adopted, replays each candidate that tuning weighed on the arrivals of
the ``--audit-horizon-s`` that followed it (by default the tuner's window), on
``--audit-sample`` of the cluster (by default all of it). That is the oracle: the same
replay the tuner runs (:class:`~dilaserve.sim.window_replay.WindowReplay`, cold, every
candidate on the same requests), but on the future it could not see, and without a
sample's pooling error. Per tuning it reports:

- ``regret``: the oracle's best candidate's goodput minus the chosen point's (0 where the
  tuning chose what the future favours), and ``held_s``, how long the choice ran (to the
  next tuning; the horizon for the last): the mean regret weighted by it is the goodput
  the choices gave up while they ran, where a row of rises a second apart weighs little;
- ``replayed_lead`` and ``oracle_lead``: the chosen point's goodput minus the starting
  point's, as the tuner replayed them (both replay whole, so this is exact) and on the
  future. Over the switches, their mean difference is how much the tuner's evidence
  over-promised a switch.

The end-to-end goodput of a tuned run moves by about a point with when its tunings fall
(docs/architecture.md, "Capacity at an SLO"); a decision's regret is paired (every
candidate on the same future requests), so it tells a forecast's or a sample's bias from a
run's draw with far fewer runs. The oracle starts cold as the tuner's replay does, so it
judges the choice given the arrivals, not the live cluster's queue at that moment.
docs/architecture.md, "Auditing the tuner".
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from dilaserve.control.operating_point import OperatingPoint
from dilaserve.eval.context import EvalContext
from dilaserve.eval.experiments import run_seed_jobs, static_mix
from dilaserve.eval.workloads import slo_at_scale, trace_workload
from dilaserve.schedule.policies import get_policy
from dilaserve.schedule.tuner import TuningRecord
from dilaserve.schedule.window import WindowArrival
from dilaserve.sim.slo import DEFAULT_SLO_SCALE
from dilaserve.sim.window_replay import WindowReplay
from dilaserve.sim.workload import Workload

#: the policy audited where ``--policies`` names none
DEFAULT_AUDITED = "dilaserve"


class AuditError(ValueError):
    """The run cannot be audited (a policy that does not tune, or one whose layout moved)."""


@dataclass(frozen=True)
class TuningAudit:
    """One tuning against the future: what it replayed and what the oracle replayed, per
    candidate label (goodput, 0-1)."""

    seed: int
    time: float
    rose: bool
    start: str
    chosen: str
    replayed: dict[str, float]
    oracle: dict[str, float]
    #: seconds the choice ran: to the next tuning (the horizon, at most)
    held_s: float

    @property
    def oracle_best(self) -> str:
        return max(self.oracle, key=self.oracle.__getitem__)

    @property
    def regret(self) -> float:
        return self.oracle[self.oracle_best] - self.oracle[self.chosen]

    @property
    def replayed_lead(self) -> float:
        return self.replayed[self.chosen] - self.replayed[self.start]

    @property
    def oracle_lead(self) -> float:
        return self.oracle[self.chosen] - self.oracle[self.start]

    def to_json(self) -> dict:
        """Plain JSON: a candidate a screen left out (replayed at ``-inf``) shows as null."""
        out = asdict(self)
        out["replayed"] = {k: v if math.isfinite(v) else None for k, v in self.replayed.items()}
        out.update(
            oracle_best=self.oracle_best,
            regret=self.regret,
            replayed_lead=self.replayed_lead,
            oracle_lead=self.oracle_lead,
        )
        return out


def future_arrivals(workload: Workload, slo_s: float, start: float, horizon_s: float) -> list[WindowArrival]:
    """The workload's arrivals in ``(start, start + horizon_s]``, as a tuner records arrivals
    (a request without its own SLO gets the run's ``slo_s``)."""
    return [
        WindowArrival(
            r.arrival,
            r.prompt_tokens,
            r.output_tokens,
            r.slo_s if r.slo_s is not None else slo_s,
            r.priority,
            r.min_threshold,
        )
        for r in workload.requests
        if start < r.arrival <= start + horizon_s
    ]


def audit_tunings(
    replay: WindowReplay,
    layout,
    records: Sequence[TuningRecord],
    workload: Workload,
    slo_s: float,
    horizon_s: float,
    sample: float,
    seed: int = 0,
) -> list[TuningAudit]:
    """Each record against the oracle (module docstring); a tuning followed by no arrivals
    within the horizon (the run's end) is left out."""
    out = []
    ends = [r.time for r in records[1:]] + [float("inf")]
    for k, (rec, end) in enumerate(zip(records, ends), 1):
        future = future_arrivals(workload, slo_s, rec.time, horizon_s)
        if not future:
            continue
        print(
            f"  audit seed {seed}: tuning {k}/{len(records)} at {rec.time:.1f} s, "
            f"{len(rec.replayed)} candidates on {len(future)} arrivals",
            file=sys.stderr,
            flush=True,
        )
        labels = list(rec.replayed)
        points = [OperatingPoint.from_label(label) for label in labels]
        # keep = every candidate: each replays whole, none stops at a bound.
        scores = replay(future, layout, points, sample=sample, keep=len(points))
        oracle = dict(zip(labels, scores))
        held = min(end - rec.time, horizon_s)
        out.append(TuningAudit(seed, rec.time, rec.rose, rec.start, rec.point, dict(rec.replayed), oracle, held))
    return out


@dataclass(frozen=True)
class AuditJob:
    """One seed's audit: the policy's run on the trace workload that seed draws, and its
    tunings against what came after each (runs in a seed worker, ``--jobs``)."""

    setting: str
    policy: str
    seed: int

    def run(self, ctx: EvalContext) -> list[TuningAudit]:
        at = ctx.with_seed(self.seed)
        setting = at.setting(self.setting)
        wl = trace_workload(at, setting)
        slo = slo_at_scale(at, setting, wl, DEFAULT_SLO_SCALE)
        setting = static_mix(at, setting, wl, slo)
        (res,) = at.run_policies(setting, [self.policy], wl, slo, f" seed {self.seed}")
        if res.reconfig_launches:
            raise AuditError(
                f"{self.policy} applied reconfiguration plans at seed {self.seed} ({res.reconfig_launches} "
                "launches): the audit replays the cluster the run started on, so audit a run that keeps it "
                "(e.g. --policies dilaserve-no-reconfig)"
            )
        sim = at.simulator(setting)
        replay = WindowReplay(sim.setting, sim.progress, sim.predictors, sim.config, get_policy(self.policy))
        opts = ctx.options
        return audit_tunings(
            replay,
            setting.starting_layout(),
            res.tuning_log,
            wl,
            slo,
            opts.audit_window_s,
            opts.audit_sample,
            self.seed,
        )


def summarize_audits(audits: Sequence[TuningAudit]) -> dict:
    """Regret (in goodput, 0-1) over all tunings, the rises' and the others', and weighted
    by how long each choice ran; how often the chosen point was the oracle's best; and over
    the switches how far the replayed lead exceeded the oracle's."""

    def mean(values) -> float | None:
        values = list(values)
        return sum(values) / len(values) if values else None

    switches = [a for a in audits if a.chosen != a.start]
    held = sum(a.held_s for a in audits)
    return {
        "tunings": len(audits),
        "rises": sum(a.rose for a in audits),
        "switches": len(switches),
        "mean_regret": mean(a.regret for a in audits),
        "mean_regret_rises": mean(a.regret for a in audits if a.rose),
        "mean_regret_intervals": mean(a.regret for a in audits if not a.rose),
        "mean_regret_held": sum(a.regret * a.held_s for a in audits) / held if held > 0 else None,
        "chose_oracle_best": mean(a.chosen == a.oracle_best for a in audits),
        "switch_overpromise": mean(a.replayed_lead - a.oracle_lead for a in switches),
    }


def tuner_audit(ctx: EvalContext) -> tuple[dict, str]:
    """The audit's JSON document and its markdown (module docstring)."""
    opts = ctx.options
    policy = opts.policies[0] if opts.policies else DEFAULT_AUDITED
    if len(opts.policies or ()) > 1:
        raise AuditError(f"audit takes one policy: --policies {policy} (it was given {len(opts.policies)})")
    if not get_policy(policy).tune:
        raise AuditError(f"{policy} does not tune, so it has no tunings to audit: audit dilaserve or a variant of it")
    setting = opts.settings[0]
    jobs = [AuditJob(setting, policy, seed) for seed in opts.run_seeds]
    audits = [a for seed_audits in run_seed_jobs(ctx, jobs) for a in seed_audits]
    doc = {
        "policy": policy,
        "setting": setting,
        "seeds": list(opts.run_seeds),
        "horizon_s": opts.audit_window_s,
        "sample": opts.audit_sample,
        "summary": summarize_audits(audits),
        "tunings": [a.to_json() for a in audits],
    }
    return doc, _markdown(doc, audits)


def _markdown(doc: dict, audits: Sequence[TuningAudit]) -> str:
    def pts(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:+.2f}"

    s = doc["summary"]
    lines = [
        f"# Tuner audit: {doc['policy']} on {doc['setting']}, seeds {', '.join(map(str, doc['seeds']))}",
        "",
        f"Each tuning's candidates replayed on the next {doc['horizon_s']:g} s of arrivals "
        f"({doc['sample']:g} of the cluster, cold). Goodput differences in points.",
        "",
        f"- {s['tunings']} tunings ({s['rises']} on a rise), {s['switches']} switches; the chosen point was "
        f"the oracle's best in {100 * (s['chose_oracle_best'] or 0):.0f}% of them.",
        f"- Mean regret {pts(s['mean_regret'])} (rises {pts(s['mean_regret_rises'])}, "
        f"intervals {pts(s['mean_regret_intervals'])}; weighted by how long each choice ran "
        f"{pts(s['mean_regret_held'])}); a switch's replayed lead exceeded its lead on the future by "
        f"{pts(s['switch_overpromise'])} on average.",
        "",
        "| seed | time (s) | rise | from | chose | ran (s) | oracle's best | regret | replayed lead | oracle lead |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for a in audits:
        lines.append(
            f"| {a.seed} | {a.time:.1f} | {'yes' if a.rose else ''} | {a.start} | {a.chosen} | {a.held_s:.1f} | "
            f"{a.oracle_best} | "
            f"{pts(a.regret)} | {pts(a.replayed_lead)} | {pts(a.oracle_lead)} |"
        )
    return "\n".join(lines)
