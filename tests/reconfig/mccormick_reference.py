"""Stage 1 as it was solved before the disaggregated form, kept as a reference.

Node patterns (``m[p]`` nodes run the multiset ``p`` of TP degrees), McCormick envelopes of
``w = z u`` and ``q = z r``, and the lexicographic objective as two cold solves: the best
average threshold, then the most SLO slack within a hair of it at a 0.1% gap. The new
solve must give the same average threshold and at least as much slack.
"""

from __future__ import annotations

import numpy as np
import pulp

from dilaserve.reconfig.solver import solve
from dilaserve.reconfig.stage1 import CapacityProblem, _weights, quality_of, slack_of


def node_patterns(degrees, gpus_per_node: int, partial: bool) -> list[tuple[int, ...]]:
    """Every multiset of TP degrees that fills one node (``partial``: that fits it)."""
    out: list[tuple[int, ...]] = []

    def rec(prefix: tuple[int, ...], room: int, start: int) -> None:
        if room == 0 or partial:
            out.append(prefix)
        for i in range(start, len(degrees)):
            if degrees[i] <= room:
                rec(prefix + (degrees[i],), room - degrees[i], i)

    rec((), gpus_per_node, 0)
    return out


def reference_solve(pb: CapacityProblem, time_limit_s: float = 60.0) -> tuple[float, float] | None:
    """(quality, slack) of the old method's plan; None when it found none."""
    K, C, D = range(len(pb.classes)), range(len(pb.thresholds)), pb.degrees
    pats = node_patterns(D, pb.gpus_per_node, partial=pb.fixed_counts is not None)
    T, R = pb.tokens_per_step, pb.recompute_steps()
    U = {k: max(pb.classes[k].output_tokens / min(T), R[k]) for k in K}
    B = {d: pb.batches(d) for d in D}
    cost = {(d, b): pb.step_costs(d, b) for d in D for b in B[d]}
    w8 = _weights(pb)
    prob = pulp.LpProblem("stage1_reference", pulp.LpMaximize)
    V = prob.add_variable
    m = {p: V(f"m_{i}", 0, pb.nodes, cat="Integer") for i, p in enumerate(pats)}
    z = {(d, b): V(f"z_{d}_{b}", cat="Binary") for d in D for b in B[d]}
    s = {(k, c): V(f"s_{k}_{c}", 0) for k in K for c in C}
    u = {(k, d): V(f"u_{k}_{d}", 0, U[k]) for k in K for d in D}
    r = {(k, d): V(f"r_{k}_{d}", 0, R[k]) for k in K for d in D}
    w = {(k, d, b): V(f"w_{k}_{d}_{b}", 0, U[k]) for k in K for d in D for b in B[d]}
    q = {(k, d, b): V(f"q_{k}_{d}_{b}", 0, R[k]) for k in K for d in D for b in B[d]}
    n_inst = {d: pulp.lpSum(p.count(d) * m[p] for p in pats) for d in D}

    def seconds(k, d, b):
        lc, lr = cost[d, b]
        return lc * w[k, d, b] + (lr - lc) * q[k, d, b]

    quality = pulp.lpSum(
        w8[k] / pb.classes[k].output_tokens * pulp.lpSum(pb.thresholds[c] * T[c] * s[k, c] for c in C) for k in K
    )
    lat = {k: pulp.lpSum(seconds(k, d, b) for d in D for b in B[d]) for k in K}
    slack = pulp.lpSum(w8[k] * (1 - lat[k] / pb.classes[k].slo_s) for k in K if np.isfinite(pb.classes[k].slo_s))
    prob += quality
    prob += pulp.lpSum(m.values()) == pb.nodes, "nodes"
    for d in D:
        prob += pulp.lpSum(z[d, b] for b in B[d]) == 1, f"one_batch_{d}"
        busy = pulp.lpSum(pb.classes[k].rate * seconds(k, d, b) / b for k in K for b in B[d])
        prob += busy <= n_inst[d], f"capacity_{d}"
        if pb.fixed_counts is not None:
            prob += n_inst[d] == int(pb.fixed_counts.get(d, 0)), f"fixed_{d}"
    for k in K:
        cls = pb.classes[k]
        prob += pulp.lpSum(T[c] * s[k, c] for c in C) == cls.output_tokens, f"tokens_{k}"
        prob += pulp.lpSum(s[k, c] for c in C) == pulp.lpSum(u[k, d] for d in D), f"steps_{k}"
        prob += pulp.lpSum(r[k, d] for d in D) == float(R[k]), f"recompute_{k}"
        if np.isfinite(cls.slo_s):
            prob += lat[k] <= cls.slo_s, f"slo_{k}"
        for d in D:
            prob += r[k, d] <= u[k, d], f"r_le_u_{k}_{d}"
            for b in B[d]:
                for x, xs, bound, tag in ((u, w, U[k], "w"), (r, q, R[k], "q")):
                    prob += xs[k, d, b] <= bound * z[d, b], f"{tag}_ub_z_{k}_{d}_{b}"
                    prob += xs[k, d, b] <= x[k, d], f"{tag}_ub_x_{k}_{d}_{b}"
                    prob += xs[k, d, b] >= x[k, d] - bound * (1 - z[d, b]), f"{tag}_lb_{k}_{d}_{b}"

    def read() -> tuple[float, float]:
        batch = {d: max(B[d], key=lambda b: z[d, b].value() or 0.0) for d in D}
        steps_at = np.array([[s[k, c].value() or 0.0 for c in C] for k in K])
        steps_on = np.array([[u[k, d].value() or 0.0 for d in D] for k in K])
        recompute_on = np.array([[r[k, d].value() or 0.0 for d in D] for k in K])
        return quality_of(pb, steps_at), slack_of(pb, batch, steps_on, recompute_on)

    if not solve(prob, time_limit_s).has_solution:
        return None
    first = read()
    best = float(pulp.value(quality))
    prob += quality >= best - 1e-6 * max(1.0, abs(best)), "keep_quality"
    prob.setObjective(slack)
    if not solve(prob, time_limit_s, rel_gap=1e-3).has_solution:
        return first
    second = read()
    return second if second[1] > first[1] else first
