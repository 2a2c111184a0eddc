"""Stage 1 of reconfiguration: capacity planning (``docs/architecture.md`` section 9).

Decides how many TP-d instances each node runs, one batch size per TP degree, and how each
request class's steps split across thresholds and TP degrees, maximising the
request-rate-weighted average threshold per output token (tie-break: SLO slack).

Steps follow the step law in the served model's family. Bidirectional (dual cache): a
class-k request decodes O_k / B blocks, and each block takes exactly one recompute step
(whole canvas) whatever the threshold; only the number of cache steps (block only) depends
on the threshold split. Block-causal: every step is a block step (a cache step) except the
request's one prefill (prompt + first block), a fixed per-request cost. Either way the
recompute steps of class k are a constant R_k (O_k / B, or 1), split across TP degrees, and
the threshold split moves cache steps, so the program stays linear.

Variables (k: class, c: threshold, d: TP degree, b: batch size):
  N[d]     integer  instances of TP-d. TP degrees are powers of two dividing the node, so
                    any counts whose GPUs fit the cluster pack onto its nodes (pack_nodes):
                    counting per node or per node pattern would only add equivalent
                    solutions, and the model stays the same size at 16 GPUs and at 256.
  z[d,b]   binary   TP-d instances run batch size b (exactly one b per degree)
  s[k,c]   >= 0     steps of a class-k request at threshold c
  w[k,d,b] >= 0     steps of a class-k request on TP-d instances batching b (it may
                    migrate); u[k,d] = sum_b w[k,d,b], and w[k,d,b] <= U[k,d,b] z[d,b]
  q[k,d,b] >= 0     of those, recompute steps (q <= w, q <= R_k z[d,b])
  n[d,b]   >= 0     TP-d instances batching b: sum_b n[d,b] = N[d], n[d,b] <= N_max z[d,b]
Since exactly one z[d,b] is 1, w, q and n are the products z[d,b] u[k,d], z[d,b] r[k,d]
and z[d,b] N[d] of the plain model exactly. Splitting them per batch size (a disaggregated,
convex-hull form of each degree's batch choice) in place of McCormick envelopes of the
products keeps the relaxation tight: the LP cannot price a class's steps at one batch size
and its capacity at another. U[k,d,b] is the least of the class's most steps
(O_k / min_c T_c), what its SLO allows at that step cost and what TP-d's most instances can
run; none cuts off a plan.
Constraints:
  token completeness   sum_c T_c s[k,c] = O_k
  step consistency     sum_c s[k,c] = sum_{d,b} w[k,d,b]
  recompute steps      sum_{d,b} q[k,d,b] = R_k
  per-class SLO        t_k = sum_{d,b} Lc[d,b] (w - q)[k,d,b] + Lr[d,b] q[k,d,b] <= SLO_k
  load <= capacity     sum_k rate_k (Lc[d,b] (w - q) + Lr[d,b] q)[k,d,b] / b <= n[d,b]
                       (instance-seconds per second: a TP-d instance batching b requests
                       spends one step latency on b request-steps)
  GPUs                 sum_d d N[d] = nodes x GPUs per node (<= when the counts are pinned
                       to score the running cluster, which may leave GPUs idle)
Lc[d,b] and Lr[d,b] are the cache- and recompute-step latencies of a TP-d instance batching
b requests of the workload's mean size (block-causal: Lr is the prefill, and Lc feeds the
block plus the appends' share at the lowest threshold, the most appends per step). Without
caching every step is priced at Lc (and R_k = 0).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pulp

from dilaserve.control.step_law import step_split
from dilaserve.engine.state import StepKind
from dilaserve.profile.types import LatencyProfile
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.reconfig.monitor import RequestClass
from dilaserve.reconfig.solver import SolveResult, solve

log = logging.getLogger(__name__)

LatencyTable = Mapping[tuple[int, int], float]


@dataclass(frozen=True)
class CapacityProblem:
    """Stage 1's inputs.

    Attributes:
        classes: request classes (rates, mean prompt and canvas lengths, SLOs).
        thresholds: candidate thresholds, ascending.
        tokens_per_step: effective ``T_c = B / S_c`` at each threshold (the step law).
        degrees: TP degrees the planner may use.
        nodes / gpus_per_node: the cluster.
        latency: ``Lc[d, b]`` seconds per cache step (per step when caching is off).
        slack_weight: weight of the SLO-slack tie-break.
        fixed_counts: pin the instance count per TP degree (to score the current
            configuration); nodes may then leave GPUs idle, as a running cluster may.
        recompute_latency: ``Lr[d, b]`` seconds per recompute step; None when caching is off.
        block_length: tokens per block; each block of a request takes one recompute step
            (bidirectional).
        block_causal: block diffusion: a request's only recompute step is its prefill.
    """

    classes: tuple[RequestClass, ...]
    thresholds: tuple[float, ...]
    tokens_per_step: tuple[float, ...]  # T_c, aligned with thresholds
    degrees: tuple[int, ...]
    nodes: int
    gpus_per_node: int
    latency: LatencyTable
    slack_weight: float = 1e-3
    fixed_counts: Mapping[int, int] | None = None
    recompute_latency: LatencyTable | None = None
    block_length: int = 0
    block_causal: bool = False

    def __post_init__(self) -> None:
        for d in self.degrees:
            if d < 1 or d & (d - 1) or self.gpus_per_node % d:
                raise ValueError(
                    f"CapacityProblem.degrees has {d}: each TP degree must be a power of two that divides "
                    f"gpus_per_node={self.gpus_per_node} (as ClusterConfig requires), so instance counts pack "
                    "onto nodes"
                )

    def batches(self, d: int) -> list[int]:
        return sorted(b for (dd, b) in self.latency if dd == d)

    @property
    def total_rate(self) -> float:
        return sum(k.rate for k in self.classes)

    @property
    def cached(self) -> bool:
        return self.recompute_latency is not None and self.block_length > 0

    def recompute_steps(self) -> np.ndarray:
        """``R_k``: recompute steps of a class-k request (one per block, or the block-causal
        prefill; 0 without caching)."""
        if not self.cached:
            return np.zeros(len(self.classes))
        split = [
            step_split(0.0, k.prompt_tokens, k.output_tokens, self.block_length, self.block_causal)
            for k in self.classes
        ]
        return np.array([sp.recompute_steps for sp in split])

    def step_costs(self, d: int, b: int) -> tuple[float, float]:
        """(cache-step, recompute-step) seconds of TP-d batching b requests."""
        lc = self.latency[d, b]
        return lc, (self.recompute_latency[d, b] if self.cached else lc)


@dataclass(frozen=True)
class CapacityPlan:
    counts: dict[int, int]  # instances per TP degree
    node_counts: tuple[dict[int, int], ...]  # per node: instances per TP degree
    batch: dict[int, int]  # batch size (requests) per TP degree
    steps_at: np.ndarray  # s[k, c]
    steps_on: np.ndarray  # u[k, d], columns in problem.degrees order
    recompute_on: np.ndarray  # r[k, d], the recompute steps among u[k, d]
    quality: float
    slack: float
    #: quality + slack_weight x slack: what the solver maximised and the trigger compares.
    objective: float
    solve: SolveResult = field(compare=False)


def pack_nodes(counts: Mapping[int, int], nodes: int, gpus_per_node: int) -> tuple[dict[int, int], ...]:
    """Per node, instances per TP degree for ``counts``: the largest degrees first, each on
    the first node with room.

    With TP degrees that are powers of two dividing the node (``ClusterConfig`` enforces
    it), a node's free GPUs are always a multiple of the degree being placed, so this packs
    every count whose GPUs fit the cluster, and fills nodes in order. Raises ValueError
    when the counts need more GPUs than the cluster has.
    """
    free = [gpus_per_node] * nodes
    out: list[dict[int, int]] = [{d: 0 for d in counts} for _ in range(nodes)]
    for d in sorted(counts, reverse=True):
        for _ in range(int(counts[d])):
            n = next((i for i, room in enumerate(free) if room >= d), None)
            if n is None:
                raise ValueError(f"{dict(counts)} needs more than {nodes} x {gpus_per_node} GPUs")
            free[n] -= d
            out[n][d] += 1
    return tuple(out)


def step_latency_table(
    profile: LatencyProfile,
    cluster: ClusterConfig,
    degrees: Sequence[int],
    mean_tokens: float,
    block_length: int,
    recompute_tokens: float | None = None,
    fed_tokens: float | None = None,
) -> tuple[dict[tuple[int, int], float], dict[tuple[int, int], float] | None]:
    """(Lc, Lr): cache- and recompute-step seconds of TP-d batching b requests of
    ``mean_tokens`` tokens: ``Lc = LP_cache[b fed]`` (``fed``: one block per request, or
    the ``fed_tokens`` of a block-causal step with its appends' share) and ``Lr =
    LP_recompute[b recompute_tokens]`` (default the whole canvas; a block-causal prefill
    runs the prompt and first block). Without caching (``block_length <= 1``) every step is
    a recompute step: ``(Lr, None)``.

    Batch sizes that exceed the degree's token limit are left out.
    """
    rec_tokens = mean_tokens if recompute_tokens is None else recompute_tokens
    fed = block_length if fed_tokens is None else fed_tokens
    cache: dict[tuple[int, int], float] = {}
    recompute: dict[tuple[int, int], float] = {}
    for d in degrees:
        for b in cluster.batch_options:
            if b * mean_tokens > cluster.max_batch_tokens[d] and b > 1:
                continue
            recompute[d, b] = profile.latency(d, b * rec_tokens, StepKind.RECOMPUTE)
            if block_length > 1:
                cache[d, b] = profile.latency(d, b * fed, StepKind.CACHE)
    return (cache, recompute) if block_length > 1 else (recompute, None)


def _weights(pb: CapacityProblem) -> np.ndarray:
    rates = np.array([k.rate for k in pb.classes])
    return rates / rates.sum()


def quality_of(pb: CapacityProblem, steps_at: np.ndarray) -> float:
    """Rate-weighted average threshold per output token."""
    g, t = np.array(pb.thresholds), np.array(pb.tokens_per_step)
    out = np.array([k.output_tokens for k in pb.classes])
    per_class = (steps_at * (g * t)[None, :]).sum(axis=1) / out
    return float(_weights(pb) @ per_class)


def _costs(pb: CapacityProblem, batch: Mapping[int, int]) -> tuple[np.ndarray, np.ndarray]:
    lc, lr = zip(*(pb.step_costs(d, batch[d]) for d in pb.degrees))
    return np.array(lc), np.array(lr)


def class_latency(
    pb: CapacityProblem, batch: Mapping[int, int], steps_on: np.ndarray, recompute_on: np.ndarray
) -> np.ndarray:
    """t_k: seconds of a class-k request, its cache steps at Lc and recompute steps at Lr."""
    lc, lr = _costs(pb, batch)
    return (steps_on - recompute_on) @ lc + recompute_on @ lr


def slack_of(pb: CapacityProblem, batch: Mapping[int, int], steps_on: np.ndarray, recompute_on: np.ndarray) -> float:
    slo = np.array([k.slo_s for k in pb.classes])
    t = class_latency(pb, batch, steps_on, recompute_on)
    frac = np.where(np.isfinite(slo), 1.0 - t / np.where(np.isfinite(slo), slo, 1.0), 1.0)
    return float(_weights(pb) @ frac)


def capacity_rps(pb: CapacityProblem, counts: Mapping[int, int], threshold: float | None = None) -> float:
    """Requests/s of the class mix that ``counts`` instances carry with every step at
    ``threshold`` (default: the lowest candidate, the most the control plane can squeeze
    out), each degree at its best batch and running the mix in proportion.

    A class-k request on TP-d batching b costs (R_k Lr + (S_k - R_k) Lc) / b
    instance-seconds, S_k = O_k / T_c its steps.
    """
    if not pb.classes or pb.total_rate <= 0:
        return 0.0
    c = 0 if threshold is None else pb.thresholds.index(threshold)
    share = _weights(pb)
    steps = np.array([k.output_tokens for k in pb.classes]) / pb.tokens_per_step[c]
    rec = np.minimum(pb.recompute_steps(), steps)
    total = 0.0
    for d in pb.degrees:
        if counts.get(d, 0) <= 0:
            continue
        best = 0.0
        for b in pb.batches(d):
            lc, lr = pb.step_costs(d, b)
            seconds = float(share @ (rec * lr + (steps - rec) * lc)) / b
            best = max(best, 1.0 / seconds)
        total += counts[d] * best
    return total


def solve_capacity(
    pb: CapacityProblem, time_limit_s: float, tiebreak_time_s: float | None = None
) -> CapacityPlan | None:
    """Build and solve stage 1; None when it is infeasible or no solver found a solution.

    The objective is lexicographic, solved as two solves of one model: the best average
    threshold first, then, with it held, the most SLO slack, started from the first
    solve's optimum (a feasible point of the second). The slack solve gets
    ``tiebreak_time_s`` (default: what is left of the time limit); its plan replaces the
    first solve's only when it has more slack, so a tie-break that runs out never makes the
    plan worse. ``plan.solve.status`` is optimal only when both solves proved optimality.
    """
    if not pb.classes or not pb.degrees:
        return None
    model = _build(pb)
    prob = model.prob
    prob.setObjective(model.quality)
    res = solve(prob, time_limit_s)
    if not res.has_solution:
        log.info("stage 1: %s (%s, %.2fs)", res.status, res.solver, res.seconds)  # the caller says what follows
        return None
    plan = _read_plan(pb, model, res)
    if pb.slack_weight > 0 and not isinstance(model.slack, (int, float)):
        best = float(pulp.value(model.quality))
        prob += model.quality >= best - 1e-6 * max(1.0, abs(best)), "keep_quality"
        prob.setObjective(model.slack)
        budget = max(time_limit_s - res.seconds, 0.1)
        res2 = solve(prob, min(budget, tiebreak_time_s) if tiebreak_time_s else budget, warm_start=True)
        total = res.then(res2)
        second = _read_plan(pb, model, total) if res2.has_solution else None
        if second is not None and not check_capacity_plan(pb, second) and second.slack >= plan.slack:
            plan = second
        else:
            log.info(
                "stage 1: the slack tie-break solve (%s, %s) found nothing better than the first solution; keeping it",
                res2.status,
                res2.solver,
            )
            plan = CapacityPlan(**{**plan.__dict__, "solve": total})
    return plan


@dataclass(frozen=True)
class _Model:
    """Stage 1's program and the handles to read a plan back from it."""

    prob: pulp.LpProblem
    quality: pulp.LpAffineExpression
    slack: pulp.LpAffineExpression | float
    n_inst: dict
    z: dict
    s: dict
    w: dict
    q: dict


def _build(pb: CapacityProblem) -> _Model:
    """Stage 1 in its disaggregated form (module docstring), the objective left to the caller.

    ``w[k, d, b] = z[d, b] u[k, d]`` is exact with ``u[k, d] = sum_b w[k, d, b]`` and
    ``w[k, d, b] <= U[k, d, b] z[d, b]``, since exactly one ``z[d, b]`` is 1: a degree's
    steps all sit at its chosen batch size. That is the convex hull of each degree's batch
    choice, where the McCormick form's relaxation lets ``w`` sit anywhere between its
    envelopes and leaves the solver a wide gap to close. The bounds ``U[k, d, b]`` are
    what the SLO and the largest possible instance count allow (a class's steps on TP-d at
    batch b take at least ``min(Lc, Lr)`` seconds each), which tightens the relaxation
    further without cutting off any plan.
    """
    K, C, D = range(len(pb.classes)), range(len(pb.thresholds)), pb.degrees
    T = pb.tokens_per_step
    R = pb.recompute_steps()
    B = {d: pb.batches(d) for d in D}
    cost = {(d, b): pb.step_costs(d, b) for d in D for b in B[d]}
    gpus = pb.nodes * pb.gpus_per_node
    most = {d: gpus // d for d in D} if pb.fixed_counts is None else {d: int(pb.fixed_counts.get(d, 0)) for d in D}

    def bound(k: int, d: int, b: int) -> float:
        """Most steps class k can put on TP-d batching b: all its steps, no more than its SLO
        or TP-d's most instances can run."""
        cls, fastest = pb.classes[k], min(cost[d, b])
        out = max(cls.output_tokens / min(T), float(R[k]))
        if np.isfinite(cls.slo_s) and fastest > 0:
            out = min(out, cls.slo_s / fastest)
        if cls.rate > 0 and fastest > 0:
            out = min(out, b * most[d] / (cls.rate * fastest))
        return max(out, 0.0)

    w8 = _weights(pb)
    prob = pulp.LpProblem("stage1_capacity", pulp.LpMaximize)
    V = prob.add_variable
    z = {(d, b): V(f"z_{d}_{b}", cat="Binary") for d in D for b in B[d]}
    s = {(k, c): V(f"s_{k}_{c}", 0) for k in K for c in C}
    w = {(k, d, b): V(f"w_{k}_{d}_{b}", 0, bound(k, d, b)) for k in K for d in D for b in B[d]}
    q = {(k, d, b): V(f"q_{k}_{d}_{b}", 0, min(R[k], bound(k, d, b))) for k in K for d in D for b in B[d]}
    # Instance counts alone: TP degrees are powers of two dividing the node, so any counts
    # whose GPUs fit the cluster pack onto its nodes (pack_nodes); counting per node or per
    # node pattern would only add equivalent solutions for the search to tell apart.
    if pb.fixed_counts is None:
        n_inst = {d: V(f"N_{d}", 0, most[d], cat="Integer") for d in D}
    else:
        n_inst = {d: pulp.LpAffineExpression(constant=most[d]) for d in D}

    def seconds(k: int, d: int, b: int):
        """Seconds of class k's steps on TP-d at batch b (zero unless z[d, b])."""
        lc, lr = cost[d, b]
        return lc * w[k, d, b] + (lr - lc) * q[k, d, b]

    quality = pulp.lpSum(
        w8[k] / pb.classes[k].output_tokens * pulp.lpSum(pb.thresholds[c] * T[c] * s[k, c] for c in C) for k in K
    )
    lat = {k: pulp.lpSum(seconds(k, d, b) for d in D for b in B[d]) for k in K}
    slack = pulp.lpSum(w8[k] * (1 - lat[k] / pb.classes[k].slo_s) for k in K if np.isfinite(pb.classes[k].slo_s))

    used = pulp.lpSum(d * n_inst[d] for d in D)
    # Free counts fill the cluster (an idle GPU never helps); the running cluster may idle some.
    prob += (used == gpus if pb.fixed_counts is None else used <= gpus), "gpus"
    for d in D:
        prob += pulp.lpSum(z[d, b] for b in B[d]) == 1, f"one_batch_{d}"
        # n[d, b] = z[d, b] N_d: TP-d's instances, all at its one batch size.
        n = {b: V(f"n_{d}_{b}", 0, most[d]) for b in B[d]}
        prob += pulp.lpSum(n.values()) == n_inst[d], f"instances_{d}"
        for b in B[d]:
            prob += n[b] <= most[d] * z[d, b], f"n_ub_z_{d}_{b}"
            busy = pulp.lpSum(pb.classes[k].rate * seconds(k, d, b) / b for k in K)
            prob += busy <= n[b], f"capacity_{d}_{b}"
    for k in K:
        cls = pb.classes[k]
        prob += pulp.lpSum(T[c] * s[k, c] for c in C) == cls.output_tokens, f"tokens_{k}"
        steps_on = pulp.lpSum(w[k, d, b] for d in D for b in B[d])
        prob += pulp.lpSum(s[k, c] for c in C) == steps_on, f"steps_{k}"
        prob += pulp.lpSum(q[k, d, b] for d in D for b in B[d]) == float(R[k]), f"recompute_{k}"
        if np.isfinite(cls.slo_s):
            prob += lat[k] <= cls.slo_s, f"slo_{k}"
        for d in D:
            for b in B[d]:
                prob += w[k, d, b] <= w[k, d, b].upBound * z[d, b], f"w_ub_z_{k}_{d}_{b}"
                prob += q[k, d, b] <= q[k, d, b].upBound * z[d, b], f"q_ub_z_{k}_{d}_{b}"
                prob += q[k, d, b] <= w[k, d, b], f"q_le_w_{k}_{d}_{b}"
    return _Model(prob, quality, slack, n_inst, z, s, w, q)


def _read_plan(pb: CapacityProblem, model: _Model, res: SolveResult) -> CapacityPlan:
    """The plan held by the solver's current variable values."""
    val = lambda v: float(pulp.value(v) or 0.0)  # noqa: E731
    K, C, D = range(len(pb.classes)), range(len(pb.thresholds)), pb.degrees
    B = {d: pb.batches(d) for d in D}
    counts = {d: int(round(val(model.n_inst[d]))) for d in D}
    nodes = pack_nodes(counts, pb.nodes, pb.gpus_per_node)
    batch = {d: max(B[d], key=lambda b: val(model.z[d, b])) for d in D}
    steps_at = np.array([[val(model.s[k, c]) for c in C] for k in K])
    steps_on = np.array([[sum(val(model.w[k, d, b]) for b in B[d]) for d in D] for k in K])
    recompute_on = np.array([[sum(val(model.q[k, d, b]) for b in B[d]) for d in D] for k in K])
    quality, slack = quality_of(pb, steps_at), slack_of(pb, batch, steps_on, recompute_on)
    return CapacityPlan(
        counts=counts,
        node_counts=nodes,
        batch=batch,
        steps_at=steps_at,
        steps_on=steps_on,
        recompute_on=recompute_on,
        quality=quality,
        slack=slack,
        objective=quality + pb.slack_weight * slack,
        solve=res,
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
    if (plan.steps_at < -tol).any() or (plan.steps_on < -tol).any() or (plan.recompute_on < -tol).any():
        bad.append("negative steps")
    if (plan.recompute_on > plan.steps_on + tol).any():
        bad.append("more recompute steps than steps on a TP degree")
    T = np.array(pb.tokens_per_step)
    R = pb.recompute_steps()
    lat = class_latency(pb, plan.batch, plan.steps_on, plan.recompute_on)
    for k, cls in enumerate(pb.classes):
        scale = max(1.0, cls.output_tokens)
        if abs(plan.steps_at[k] @ T - cls.output_tokens) > tol * scale:
            bad.append(f"class {k}: commits {plan.steps_at[k] @ T:.4f} tokens, needs {cls.output_tokens}")
        if abs(plan.steps_at[k].sum() - plan.steps_on[k].sum()) > tol * scale:
            bad.append(f"class {k}: steps by threshold and by TP degree differ")
        if abs(plan.recompute_on[k].sum() - R[k]) > tol * scale:
            bad.append(f"class {k}: {plan.recompute_on[k].sum():.4f} recompute steps, the step law's are {R[k]:.4f}")
        if lat[k] > cls.slo_s * (1 + tol) + tol:
            bad.append(f"class {k}: latency {lat[k]:.4f}s > SLO {cls.slo_s}s")
    for d, (load, cap) in load_and_capacity(pb, plan).items():
        if load > cap * (1 + tol) + tol:
            bad.append(f"TP-{d}: load {load:.3f} > capacity {cap:.3f} instance-seconds/s")
    return bad


def load_and_capacity(pb: CapacityProblem, plan: CapacityPlan) -> dict[int, tuple[float, float]]:
    """Per TP degree: (arrival load, capacity) of the plan in instance-seconds per second:
    the step time its share of the arrivals needs at its batch size, and its instances."""
    rates = np.array([k.rate for k in pb.classes])
    out = {}
    for j, d in enumerate(pb.degrees):
        b = plan.batch[d]
        lc, lr = pb.step_costs(d, b)
        per_request = (plan.steps_on[:, j] - plan.recompute_on[:, j]) * lc + plan.recompute_on[:, j] * lr
        out[d] = (float(rates @ per_request) / b, float(plan.counts[d]))
    return out
