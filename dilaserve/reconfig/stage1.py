"""Stage 1 of reconfiguration: capacity planning (DESIGN.md section 5).

Decides how many TP-d instances each node runs, one batch size per TP degree, and how each
request class's steps split across thresholds and TP degrees, maximising the
request-rate-weighted average threshold per output token (tie-break: SLO slack).

Variables (k: class, c: threshold, d: TP degree, b: batch size, p: node pattern):
  m[p]     integer  nodes that run pattern p (a multiset of TP degrees fitting one node);
                    N_d = sum_p count(p, d) m[p] instances of TP-d. Counting identical nodes
                    by pattern instead of per node removes the symmetry between nodes, which
                    keeps the model the same size at 16 GPUs and at 256.
  z[d,b]   binary   TP-d instances run batch size b (exactly one b per degree)
  y[d,b]   >= 0     = z[d,b] * N_d   (McCormick, exact for binary z and integer N_d)
  s[k,c]   >= 0     steps of a class-k request at threshold c
  u[k,d]   >= 0     steps of a class-k request on TP-d instances (it may migrate)
  w[k,d,b] >= 0     = z[d,b] * u[k,d]  (McCormick with the bound U_k = O_k / min_c T_c)
Constraints:
  token completeness   sum_c T_c s[k,c] = O_k
  step consistency     sum_c s[k,c] = sum_d u[k,d]
  per-class SLO        t_k = sum_{d,b} L[d,b] w[k,d,b] <= SLO_k
  load <= capacity     sum_k rate_k u[k,d] <= sum_b (b / L[d,b]) y[d,b]   (request-steps/s)
  GPUs per node        by construction of the patterns; sum_p m[p] = nodes
L[d,b] is the mean step latency of a TP-d instance batching b requests of the workload's
mean size; capacity and load are therefore in request-steps per second.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np
import pulp

from dilaserve.engine.state import StepKind
from dilaserve.profile.types import LatencyProfile
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.reconfig.monitor import RequestClass
from dilaserve.reconfig.solver import SolveResult, solve

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CapacityProblem:
    classes: tuple[RequestClass, ...]
    thresholds: tuple[float, ...]
    tokens_per_step: tuple[float, ...]      # T_c, aligned with thresholds
    degrees: tuple[int, ...]
    nodes: int
    gpus_per_node: int
    latency: Mapping[tuple[int, int], float]  # L[d, b] seconds per step
    slack_weight: float = 1e-3
    #: Pin the instance count per TP degree (to score the current configuration).
    fixed_counts: Optional[Mapping[int, int]] = None

    def batches(self, d: int) -> list[int]:
        return sorted(b for (dd, b) in self.latency if dd == d)

    @property
    def total_rate(self) -> float:
        return sum(k.rate for k in self.classes)


@dataclass(frozen=True)
class CapacityPlan:
    counts: dict[int, int]                     # instances per TP degree
    node_counts: tuple[dict[int, int], ...]    # per node: instances per TP degree
    batch: dict[int, int]                      # batch size (requests) per TP degree
    steps_at: np.ndarray                       # s[k, c]
    steps_on: np.ndarray                       # u[k, d], columns in problem.degrees order
    quality: float
    slack: float
    #: quality + slack_weight x slack: what the solver maximised and the trigger compares.
    objective: float
    solve: SolveResult = field(compare=False)


def node_patterns(degrees: Sequence[int], gpus_per_node: int) -> list[tuple[int, ...]]:
    """Every multiset of TP degrees that fills one node exactly.

    The GPUs-per-node constraint is sum_d d x[n, d] <= G; an idle GPU never improves the
    objective, so only full nodes are enumerated (TP degrees divide G, so they exist).
    """
    out: list[tuple[int, ...]] = []

    def rec(prefix: tuple[int, ...], room: int, start: int) -> None:
        if room == 0:
            out.append(prefix)
            return
        for i in range(start, len(degrees)):
            if degrees[i] <= room:
                rec(prefix + (degrees[i],), room - degrees[i], i)

    rec((), gpus_per_node, 0)
    return out


def step_latency_table(
    profile: LatencyProfile, cluster: ClusterConfig, degrees: Sequence[int],
    mean_tokens: float, block_length: int,
) -> dict[tuple[int, int], float]:
    """L[d, b]: mean step latency of TP-d with b requests of ``mean_tokens`` tokens.

    With caching, a block costs (B - 1) cache steps over b blocks and one recompute step over
    every token, so the mean step is ((B - 1) LP_cache[b B] + LP_recompute[b T]) / B.
    Batch sizes that exceed the degree's token limit are left out.
    """
    table: dict[tuple[int, int], float] = {}
    for d in degrees:
        for b in cluster.batch_options:
            if b * mean_tokens > cluster.max_batch_tokens[d] and b > 1:
                continue
            rec = profile.latency(d, b * mean_tokens, StepKind.RECOMPUTE)
            if block_length > 1:
                cac = profile.latency(d, b * block_length, StepKind.CACHE)
                table[d, b] = ((block_length - 1) * cac + rec) / block_length
            else:
                table[d, b] = rec
    return table


def _weights(pb: CapacityProblem) -> np.ndarray:
    rates = np.array([k.rate for k in pb.classes])
    return rates / rates.sum()


def quality_of(pb: CapacityProblem, steps_at: np.ndarray) -> float:
    """Rate-weighted average threshold per output token."""
    g, t = np.array(pb.thresholds), np.array(pb.tokens_per_step)
    out = np.array([k.output_tokens for k in pb.classes])
    per_class = (steps_at * (g * t)[None, :]).sum(axis=1) / out
    return float(_weights(pb) @ per_class)


def class_latency(pb: CapacityProblem, batch: Mapping[int, int], steps_on: np.ndarray) -> np.ndarray:
    lat = np.array([pb.latency[d, batch[d]] for d in pb.degrees])
    return steps_on @ lat


def slack_of(pb: CapacityProblem, batch: Mapping[int, int], steps_on: np.ndarray) -> float:
    slo = np.array([k.slo_s for k in pb.classes])
    t = class_latency(pb, batch, steps_on)
    frac = np.where(np.isfinite(slo), 1.0 - t / np.where(np.isfinite(slo), slo, 1.0), 1.0)
    return float(_weights(pb) @ frac)


def solve_capacity(
    pb: CapacityProblem, time_limit_s: float, tiebreak_time_s: Optional[float] = None
) -> Optional[CapacityPlan]:
    """Build and solve stage 1; None when it is infeasible or no solver found a solution.

    The slack tie-break solve gets ``tiebreak_time_s`` (default: what is left of the time
    limit); when it runs out, its best plan so far is used, and that plan is as good as the
    first solve's on the main objective by construction.
    """
    K, C, D = range(len(pb.classes)), range(len(pb.thresholds)), pb.degrees
    if not pb.classes or not D:
        return None
    pats = node_patterns(D, pb.gpus_per_node)
    T = pb.tokens_per_step
    U = {k: pb.classes[k].output_tokens / min(T) for k in K}
    M = {d: pb.nodes * (pb.gpus_per_node // d) for d in D}
    B = {d: pb.batches(d) for d in D}
    w8 = _weights(pb)
    prob = pulp.LpProblem("stage1_capacity", pulp.LpMaximize)
    V = prob.add_variable
    m = {p: V(f"m_{i}", 0, pb.nodes, cat="Integer") for i, p in enumerate(pats)}
    z = {(d, b): V(f"z_{d}_{b}", cat="Binary") for d in D for b in B[d]}
    y = {(d, b): V(f"y_{d}_{b}", 0, M[d]) for d in D for b in B[d]}
    s = {(k, c): V(f"s_{k}_{c}", 0) for k in K for c in C}
    u = {(k, d): V(f"u_{k}_{d}", 0, U[k]) for k in K for d in D}
    w = {(k, d, b): V(f"w_{k}_{d}_{b}", 0, U[k]) for k in K for d in D for b in B[d]}
    n_inst = {d: pulp.lpSum(p.count(d) * m[p] for p in pats) for d in D}

    quality = pulp.lpSum(
        w8[k] / pb.classes[k].output_tokens * pulp.lpSum(pb.thresholds[c] * T[c] * s[k, c] for c in C) for k in K
    )
    lat = {k: pulp.lpSum(pb.latency[d, b] * w[k, d, b] for d in D for b in B[d]) for k in K}
    slack = pulp.lpSum(w8[k] * (1 - lat[k] / pb.classes[k].slo_s) for k in K if np.isfinite(pb.classes[k].slo_s))
    # Two-level objective as two solves: the best average threshold first, then the most
    # SLO slack among plans within a hair of it. (One weighted solve spends most of its time
    # closing a gap on the tiny tie-break term.)
    prob += quality

    prob += pulp.lpSum(m.values()) == pb.nodes, "nodes"
    for d in D:
        prob += pulp.lpSum(z[d, b] for b in B[d]) == 1, f"one_batch_{d}"
        for b in B[d]:
            prob += y[d, b] <= M[d] * z[d, b], f"y_ub_z_{d}_{b}"
            prob += y[d, b] <= n_inst[d], f"y_ub_n_{d}_{b}"
            prob += y[d, b] >= n_inst[d] - M[d] * (1 - z[d, b]), f"y_lb_{d}_{b}"
        load = pulp.lpSum(pb.classes[k].rate * u[k, d] for k in K)
        prob += load <= pulp.lpSum(b / pb.latency[d, b] * y[d, b] for b in B[d]), f"capacity_{d}"
        if pb.fixed_counts is not None:
            prob += n_inst[d] == int(pb.fixed_counts.get(d, 0)), f"fixed_{d}"
    for k in K:
        cls = pb.classes[k]
        prob += pulp.lpSum(T[c] * s[k, c] for c in C) == cls.output_tokens, f"tokens_{k}"
        prob += pulp.lpSum(s[k, c] for c in C) == pulp.lpSum(u[k, d] for d in D), f"steps_{k}"
        if np.isfinite(cls.slo_s):
            prob += lat[k] <= cls.slo_s, f"slo_{k}"
        for d in D:
            for b in B[d]:
                prob += w[k, d, b] <= U[k] * z[d, b], f"w_ub_z_{k}_{d}_{b}"
                prob += w[k, d, b] <= u[k, d], f"w_ub_u_{k}_{d}_{b}"
                prob += w[k, d, b] >= u[k, d] - U[k] * (1 - z[d, b]), f"w_lb_{k}_{d}_{b}"

    res = solve(prob, time_limit_s)
    if not res.has_solution:
        log.warning("stage 1: %s (%s, %.2fs)", res.status, res.solver, res.seconds)
        return None
    values = {v.name: v.value() for v in prob.variables()}
    if pb.slack_weight > 0 and slack is not None and not isinstance(slack, (int, float)):
        best = float(pulp.value(quality))
        prob += quality >= best - 1e-6 * max(1.0, abs(best)), "keep_quality"
        prob.setObjective(slack)
        # Slack is a tie-break: 0.1% of it is precise enough and saves most of the search.
        budget = max(time_limit_s - res.seconds, 0.1)
        res2 = solve(prob, min(budget, tiebreak_time_s) if tiebreak_time_s else budget, rel_gap=1e-3)
        if res2.has_solution:
            values = {v.name: v.value() for v in prob.variables()}
            res = SolveResult(res2.status, res2.solver, res.seconds + res2.seconds)
        else:
            log.warning("stage 1: the slack tie-break solve failed (%s); keeping the first solution", res2.status)
    val = lambda v: float(values.get(v.name) or 0.0)  # noqa: E731
    pattern_count = {p: int(round(val(m[p]))) for p in pats}
    counts = {d: sum(p.count(d) * n for p, n in pattern_count.items()) for d in D}
    nodes = [dict((d, p.count(d)) for d in D) for p, n in pattern_count.items() for _ in range(n)]
    batch = {d: max(B[d], key=lambda b: val(z[d, b])) for d in D}
    steps_at = np.array([[val(s[k, c]) for c in C] for k in K])
    steps_on = np.array([[val(u[k, d]) for d in D] for k in K])
    quality, slack = quality_of(pb, steps_at), slack_of(pb, batch, steps_on)
    return CapacityPlan(
        counts=counts, node_counts=tuple(nodes), batch=batch, steps_at=steps_at, steps_on=steps_on,
        quality=quality, slack=slack, objective=quality + pb.slack_weight * slack, solve=res,
    )


def check_capacity_plan(pb: CapacityProblem, plan: CapacityPlan, tol: float = 1e-5) -> list[str]:
    """Every violated stage-1 constraint, recomputed from the plan without the solver's helpers."""
    bad: list[str] = []
    D = pb.degrees
    if len(plan.node_counts) != pb.nodes:
        bad.append(f"plan covers {len(plan.node_counts)} nodes, cluster has {pb.nodes}")
    for i, nc in enumerate(plan.node_counts):
        used = sum(d * n for d, n in nc.items())
        if used > pb.gpus_per_node or any(n < 0 for n in nc.values()):
            bad.append(f"node {i} uses {used} GPUs > {pb.gpus_per_node}")
    for d in D:
        if sum(nc.get(d, 0) for nc in plan.node_counts) != plan.counts[d]:
            bad.append(f"TP-{d}: node counts do not add up to {plan.counts[d]}")
        if plan.batch[d] not in pb.batches(d):
            bad.append(f"TP-{d}: batch {plan.batch[d]} is not an option")
        if pb.fixed_counts is not None and plan.counts[d] != pb.fixed_counts.get(d, 0):
            bad.append(f"TP-{d}: {plan.counts[d]} instances, pinned to {pb.fixed_counts.get(d, 0)}")
    if (plan.steps_at < -tol).any() or (plan.steps_on < -tol).any():
        bad.append("negative steps")
    T = np.array(pb.tokens_per_step)
    lat = class_latency(pb, plan.batch, plan.steps_on)
    for k, cls in enumerate(pb.classes):
        scale = max(1.0, cls.output_tokens)
        if abs(plan.steps_at[k] @ T - cls.output_tokens) > tol * scale:
            bad.append(f"class {k}: commits {plan.steps_at[k] @ T:.4f} tokens, needs {cls.output_tokens}")
        if abs(plan.steps_at[k].sum() - plan.steps_on[k].sum()) > tol * scale:
            bad.append(f"class {k}: steps by threshold and by TP degree differ")
        if lat[k] > cls.slo_s * (1 + tol) + tol:
            bad.append(f"class {k}: latency {lat[k]:.4f}s > SLO {cls.slo_s}s")
    for d, (load, cap) in load_and_capacity(pb, plan).items():
        if load > cap * (1 + tol) + tol:
            bad.append(f"TP-{d}: load {load:.3f} > capacity {cap:.3f} request-steps/s")
    return bad


def load_and_capacity(pb: CapacityProblem, plan: CapacityPlan) -> dict[int, tuple[float, float]]:
    """Per TP degree: (arrival load, capacity) of the plan, both in request-steps per second."""
    rates = np.array([k.rate for k in pb.classes])
    return {
        d: (float(rates @ plan.steps_on[:, j]), plan.counts[d] * plan.batch[d] / pb.latency[d, plan.batch[d]])
        for j, d in enumerate(pb.degrees)
    }
