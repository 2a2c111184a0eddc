"""Stage 2 of reconfiguration: minimal-disruption placement (docs/architecture.md section 9).

Given the instance counts stage 1 chose, assign GPUs to instance slots so that as many
running instances as possible survive. Candidate slots are the aligned TP groups of every
node (TP-d at GPUs [j d, (j + 1) d)) plus the GPU set of each running instance.

  a[slot] binary     the slot runs an instance in the new configuration
  each GPU           covered by at most one chosen slot
  each TP degree d   exactly N_d chosen slots
  maximise           chosen slots that hold a running instance (kept instances)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulp

from dilaserve.cluster.base import InstanceSpec
from dilaserve.reconfig.solver import SolveResult, solve

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Slot:
    node: int
    gpus: tuple[int, ...]
    existing: str | None = None  # the running instance that occupies exactly this slot

    @property
    def tp(self) -> int:
        return len(self.gpus)


@dataclass(frozen=True)
class Placement:
    keep: tuple[str, ...]  # running instances that survive
    launch: tuple[Slot, ...]  # new instances to start
    method: str  # "ilp" or "greedy"
    solve: SolveResult | None = None


def candidate_slots(
    nodes: int, gpus_per_node: int, degrees: Sequence[int], existing: Sequence[InstanceSpec]
) -> list[Slot]:
    by_place = {(e.node, tuple(e.gpus)): e.instance_id for e in existing if e.node < nodes}
    slots = []
    for n in range(nodes):
        for d in degrees:
            for start in range(0, gpus_per_node - d + 1, d):
                g = tuple(range(start, start + d))
                slots.append(Slot(n, g, by_place.pop((n, g), None)))
    # Running instances on unaligned GPU sets (or degrees no longer allowed) stay keepable.
    slots += [Slot(n, g, iid) for (n, g), iid in by_place.items()]
    return slots


def solve_placement(
    nodes: int,
    gpus_per_node: int,
    node_counts: Sequence[Mapping[int, int]],
    existing: Sequence[InstanceSpec],
    time_limit_s: float,
) -> Placement:
    """ILP placement for the totals of ``node_counts``; the greedy placement if the ILP fails."""
    targets: dict[int, int] = {}
    for nc in node_counts:
        for d, n in nc.items():
            targets[d] = targets.get(d, 0) + n
    degrees = sorted(d for d, n in targets.items() if n > 0)
    slots = candidate_slots(nodes, gpus_per_node, degrees, existing)
    prob = pulp.LpProblem("stage2_placement", pulp.LpMaximize)
    a = [prob.add_variable(f"a_{i}", cat="Binary") for i in range(len(slots))]
    prob += pulp.lpSum(a[i] for i, s in enumerate(slots) if s.existing)
    cover: dict[tuple[int, int], list] = {}
    for i, s in enumerate(slots):
        for g in s.gpus:
            cover.setdefault((s.node, g), []).append(a[i])
    for (n, g), vs in cover.items():
        if len(vs) > 1:
            prob += pulp.lpSum(vs) <= 1, f"gpu_{n}_{g}"
    for d in sorted({s.tp for s in slots}):
        prob += pulp.lpSum(a[i] for i, s in enumerate(slots) if s.tp == d) == targets.get(d, 0), f"count_{d}"
    res = solve(prob, time_limit_s)
    if res.has_solution:
        chosen = [s for i, s in enumerate(slots) if (a[i].value() or 0) > 0.5]
        placement = Placement(
            keep=tuple(s.existing for s in chosen if s.existing),
            launch=tuple(Slot(s.node, s.gpus) for s in chosen if not s.existing),
            method="ilp",
            solve=res,
        )
        problems = check_placement(nodes, gpus_per_node, targets, existing, placement)
        if not problems:
            return placement
        log.error("stage 2: solver result violates %s; using the greedy placement", problems)
    else:
        log.warning("stage 2: %s (%s); using the greedy placement", res.status, res.solver)
    return greedy_placement(gpus_per_node, node_counts, existing)


def _first_fit(free: list[bool], d: int) -> int | None:
    for start in range(0, len(free) - d + 1, d):
        if all(free[start : start + d]):
            return start
    return None


def greedy_placement(
    gpus_per_node: int, node_counts: Sequence[Mapping[int, int]], existing: Sequence[InstanceSpec]
) -> Placement:
    """Node by node: keep running instances that fit the node's counts, largest first, then
    first-fit the new ones; if they do not fit, that node keeps nothing (always packable,
    since degrees are powers of two dividing the node)."""
    keep: list[str] = []
    launch: list[Slot] = []
    for n, nc in enumerate(node_counts):
        here = sorted((e for e in existing if e.node == n), key=lambda e: -e.tp)
        for attempt_keep in (True, False):
            free = [True] * gpus_per_node
            quota = dict(nc)
            kept, new = [], []
            if attempt_keep:
                for e in here:
                    if quota.get(e.tp, 0) > 0 and all(free[g] for g in e.gpus):
                        quota[e.tp] -= 1
                        kept.append(e.instance_id)
                        for g in e.gpus:
                            free[g] = False
            ok = True
            for d in sorted((d for d, q in quota.items() for _ in range(q)), reverse=True):
                start = _first_fit(free, d)
                if start is None:
                    ok = False
                    break
                free[start : start + d] = [False] * d
                new.append(Slot(n, tuple(range(start, start + d))))
            if ok:
                keep += kept
                launch += new
                break
    return Placement(tuple(keep), tuple(launch), method="greedy")


def check_placement(
    nodes: int,
    gpus_per_node: int,
    targets: Mapping[int, int],
    existing: Sequence[InstanceSpec],
    placement: Placement,
) -> list[str]:
    """Every violated stage-2 constraint, recomputed from the placement alone."""
    bad: list[str] = []
    by_id = {e.instance_id: e for e in existing}
    used: dict[tuple[int, int], str] = {}
    counts: dict[int, int] = {}
    groups = [(by_id[i].node, tuple(by_id[i].gpus), i) for i in placement.keep if i in by_id]
    if len(groups) != len(placement.keep) or len(set(placement.keep)) != len(placement.keep):
        bad.append("keeps unknown or repeated instances")
    groups += [(s.node, s.gpus, f"new@{s.node}:{s.gpus}") for s in placement.launch]
    for node, gpus, name in groups:
        counts[len(gpus)] = counts.get(len(gpus), 0) + 1
        if not 0 <= node < nodes:
            bad.append(f"{name} is on node {node} outside the cluster")
        for g in gpus:
            if not 0 <= g < gpus_per_node:
                bad.append(f"{name} uses GPU {g} outside the node")
            if (node, g) in used:
                bad.append(f"{name} and {used[node, g]} share GPU {g} of node {node}")
            used[node, g] = name
    for d in set(counts) | set(targets):
        if counts.get(d, 0) != targets.get(d, 0):
            bad.append(f"TP-{d}: {counts.get(d, 0)} instances, target {targets.get(d, 0)}")
    return bad
