"""Why a claim of the fidelity table (:mod:`dilaserve.eval.fidelity`) differs from ours:
one reason per claim, shown only where one of ours is more than 20% off the paper's.

``{law[threshold]}`` fields are that law's cache steps per block, ``{frontier[law]}`` the
best static point on that law's trace (:func:`dilaserve.eval.fidelity.cache_steps_facts`),
filled from the run, so a retrained model never leaves a stale number.
"""

from __future__ import annotations

_SLOW_PEAK = (
    "in our trace at 1.0x nominal capacity the fixed-0.9 baselines still meet most SLOs (quick fidelity "
    "runs use 40-s phases, which build less backlog than the trace experiment's 75 s, where they reach "
    "67%); the paper's baselines end at 61-70%, so its peak overloads a fixed-0.9 cluster more than ours"
)
_SLO3 = (
    "our SLO sweep runs at 0.7x nominal capacity, a lighter load than the paper's high load, where its gains "
    "come; on the embedded law the baselines already meet nearly every SLO 3x there. Its two numbers are "
    "matched to our gains over the better and the worse baseline"
)
#: Why a claim's number differs from ours (shown only where one of ours is over 20% off).
WHY: dict[str, str] = {
    "Table 4: SLO attainment, DiLaServe": _SLOW_PEAK,
    "Table 4: SLO attainment, Llumnix": _SLOW_PEAK,
    "Table 4: SLO attainment, INFaaS": _SLOW_PEAK,
    "Table 4: mean latency vs Llumnix": "admission and scheduling cut the queueing, and the price of capacity "
    "lowers thresholds while the cluster is loaded; the paper's cut also comes from its lower thresholds",
    "Table 4: mean latency vs INFaaS": "our INFaaS is as slow as our Llumnix (migration buys the baselines "
    "nothing at this load), so the cut is alike against both",
    "Table 4: quality vs the better baseline": "dilaserve lowers a threshold only where an SLO or the price of "
    "capacity asks for it, so quality moves little; ours is accuracy x 10, the paper's a judge's score",
    "Table 4: attainment gain over the best static point": "the paper measures against fixed-0.9 baselines "
    "only; the best static point by goodput may refuse what it cannot finish and run any fixed threshold "
    "({frontier[embedded]} on the embedded law; {frontier[published]} on the published one), and takes most "
    "of that gain: it is the frontier an adaptive server must beat (docs/architecture.md)",
    "Benchmarks: best attainment gain over the better baseline": "our largest gain comes at 1.1x capacity, the "
    "highest quick load, from admission and lower thresholds; a lower threshold buys less on the embedded law "
    "(cache steps per block {embedded[0.9]} at 0.9, {embedded[0.7]} at 0.7, and accuracy falls steeply below) "
    "than on the published one ({published[0.9]} to {published[0.5]} for 3 points of accuracy)",
    "Benchmarks: accuracy change at that gain": "dilaserve keeps 0.9 unless a drop makes an SLO or the price of "
    "capacity says it pays; on the published law's flat quality curve the price lowers thresholds further "
    "under load, for a few percent of accuracy",
    "SLO scale 3: gain over the better baseline": _SLO3,
    "SLO scale 3: gain over the worse baseline": _SLO3,
    "Ablation: SLO-aware thresholds vs a fixed threshold": "with the dual cache a lower threshold saves only "
    "cache steps (the recompute step stays): on the embedded law {embedded[0.9]} to {embedded[0.7]} per block "
    "from 0.9 to 0.7, on the published law {published[0.9]} to {published[0.7]}, where the gain is larger; the "
    "paper's 70.8 comes where a fixed 0.9 collapses",
    "Ablation: load control": "the runs with and without it are identical: at 1.0x capacity the paper's walk "
    "never finds the in-flight work past capacity, so its caps never bind",
    "Predictor: one-shot error, worst progress decile": "the worst decile is the last, where few steps remain "
    "and any error of a length-only estimate is large relative to them; our answers are 1-4 blocks of "
    "synthetic tasks, not LLaDA's GSM8K answers",
    "Predictor: progress features": "the reference model sees only threshold and length, refit without tuning "
    "on answers of 1-4 blocks; the progress features then remove the whole within-request trend",
    "Predictor: confidence features on top": "the published law draws each step's confidence statistics "
    "independently of the request, so they say nothing about later steps; the embedded law's are real "
    "and cut the error more than the paper's",
    "Predictor: one batched update per step": "ours: one batched LightGBM call for 32 requests x 5 thresholds on "
    "this CPU against an analytic H100 cache step; the paper updates per token on its GPUs",
    "TP-2 step latency vs TP-1": "the analytic roofline's TP scaling (calibrated once, docs/architecture.md)",
    "TP-4 step latency vs TP-1": "the analytic roofline's TP scaling (calibrated once, docs/architecture.md)",
    "Migration at any step: latency, 4 instances": "a move before a cache step costs an extra recompute step "
    "and 2 ms of transfer; on a fast H100 profile that is small next to the queueing",
    "Migration at any step: latency, 16 instances": "a move before a cache step costs an extra recompute step "
    "and 2 ms of transfer; on a fast H100 profile that is small next to the queueing",
}
