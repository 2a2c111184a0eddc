"""``python -m dilaserve.eval capacity``: what a lower threshold and a larger TP degree buy.

Load control and reconfiguration can only trade what the step law and the latency profile
offer: load control buys the capacity a lower threshold frees, and reconfiguration trades
TP-1's throughput for a faster instance. This table prints both, with no simulation, from
the same capacity model the experiments place their loads with
(:func:`~dilaserve.sim.capacity.nominal_capacity_rps`): per setting, per candidate
threshold, the requests/s a static cluster of every instance at one TP degree sustains on
the trace's lengths, and the model's measured accuracy at that threshold.

Its JSON line, ``{"capacity": {SETTING: {"law", "lengths", "thresholds", "accuracy",
"rps": {TP: [req/s per threshold]}}}}``, is recorded like any run's and rendered in
docs/results.md (docs/architecture.md, "The paper's load-control ablation").
"""

from __future__ import annotations

from dataclasses import replace

from dilaserve.eval.context import EvalContext
from dilaserve.eval.results_doc import capacity_markdown
from dilaserve.sim.capacity import nominal_capacity_rps
from dilaserve.sim.setting import ClusterSetting


def setting_capacity(ctx: EvalContext, setting: ClusterSetting) -> dict:
    """One setting's row of the table: capacity per TP degree and threshold, and accuracy."""
    tr = ctx.trace_for(setting)
    law = ctx.law_of(setting)
    thresholds = setting.control.thresholds
    rps = {
        str(tp): [
            round(
                nominal_capacity_rps(replace(setting, initial_tp=tp), law.table, tr.prompt_tokens, tr.output_tokens, t),
                2,
            )
            for t in thresholds
        ]
        for tp in setting.cluster.tp_degrees
    }
    return {
        "law": law.name,
        "lengths": ctx.lengths_of(setting),
        "thresholds": list(thresholds),
        "accuracy": [round(law.quality.accuracy(t), 4) for t in thresholds],
        "rps": rps,
    }


def capacity_table(ctx: EvalContext) -> tuple[dict, str]:
    """The JSON document and its markdown for every ``--settings`` entry."""
    doc = {s.name: setting_capacity(ctx, s) for s in ctx.settings}
    return {"capacity": doc}, "\n".join(capacity_markdown("capacity", doc))
