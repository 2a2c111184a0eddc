"""A reconfiguration plan the backend can execute without dropping a request.

New instances launch one at a time. Before each launch, only the old instances whose GPUs
it needs are drained (no new requests; running ones migrate away at their next legal
point or finish) and stopped. Old instances nobody needs keep serving.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dilaserve.cluster.base import InstanceSpec
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.reconfig.stage2 import Placement

_ids = itertools.count()


@dataclass(frozen=True)
class PlanStep:
    launch: InstanceSpec
    #: Old instances to drain and stop first, because ``launch`` needs their GPUs.
    stop_first: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReconfigPlan:
    steps: tuple[PlanStep, ...]
    keep: tuple[str, ...]
    counts: dict[int, int]  # target instances per TP degree
    batch: dict[int, int]  # stage-1 batch size (requests) per TP degree
    objective: float | None  # stage-1 objective of the target (None: fallback)
    current_objective: float | None  # the same for the running configuration
    reason: str
    #: Seconds from the plan's start until its last launch is ready: drains, then launches.
    transition_s: float = 0.0
    #: Seconds the plan is expected to hold, over which its transition must pay back (None:
    #: ``ReconfigConfig.lifetime_s``); a plan made ahead holds until the forecast rate
    #: outgrows it (:func:`~dilaserve.reconfig.forecast.holding_time_s`).
    hold_s: float | None = None
    #: The most arrivals per second the plan must face while it holds (a plan made ahead:
    #: the forecast's; None: the rate the starting layout carries, ``Reconfigurator.peak_rps``).
    peak_rps: float | None = None
    #: The GPUs this plan may hold offline at once (None: the reconfigurator's budget,
    #: ``ReconfigConfig.max_offline_share``); the way home at a rise rebuilds one node at a time.
    max_offline_gpus: int | None = None

    @property
    def stops(self) -> tuple[str, ...]:
        return tuple(i for st in self.steps for i in st.stop_first)


def node_counts_of(layout: Sequence[InstanceSpec], nodes: int) -> list[dict[int, int]]:
    """Instances per TP degree on each of ``nodes`` nodes."""
    out: list[dict[int, int]] = [{} for _ in range(nodes)]
    for s in layout:
        out[s.node][s.tp] = out[s.node].get(s.tp, 0) + 1
    return out


def all_tp1_node_counts(cluster: ClusterConfig, degrees: Sequence[int]) -> list[dict[int, int]]:
    """The safe fallback: the smallest allowed degree on every GPU (TP-1 when allowed)."""
    d = min(degrees) if degrees else 1
    return [{d: cluster.gpus_per_node // d} for _ in range(cluster.nodes)]


def static_layout(cluster: ClusterConfig, tp: int = 1, prefix: str = "inst") -> list[InstanceSpec]:
    """A fixed cluster of TP-``tp`` instances on every GPU (the baselines' static cluster)."""
    return [
        InstanceSpec(f"{prefix}-{n}-{g}", tp, n, tuple(range(g, g + tp)), cluster.max_batch_tokens[tp])
        for n in range(cluster.nodes)
        for g in range(0, cluster.gpus_per_node - tp + 1, tp)
    ]


def names_a_layout(text: str) -> bool:
    """``text`` lists instances per node (``4,4,2+1+1``) rather than naming a mix (``1``, ``stage1``)."""
    return any(c in text for c in ",+")


def node_counts_from_text(text: str) -> list[dict[int, int]]:
    """Per node, instances per TP degree, from ``"4,4,4,2+1+1"``: nodes separated by commas,
    a node's instances by ``+`` (there, one TP-2 and two TP-1 instances on the last node)."""
    nodes = []
    for node in text.split(","):
        counts: dict[int, int] = {}
        for part in node.split("+"):
            if not part.strip().isdigit() or int(part) < 1:
                raise ValueError(
                    f"layout {text!r}: {part.strip()!r} is not a TP degree; write one entry per node, "
                    "its instances' TP degrees joined by '+', e.g. 4,4,4,2+1+1"
                )
            counts[int(part)] = counts.get(int(part), 0) + 1
        nodes.append(counts)
    return nodes


def layout_from_node_counts(
    cluster: ClusterConfig, node_counts: Sequence[Mapping[int, int]], prefix: str = "inst"
) -> list[InstanceSpec]:
    """Instances for ``node_counts`` (per node, instances per TP degree), each TP group on
    aligned GPUs, the largest degrees first so the groups pack the node."""
    out = []
    for n, counts in enumerate(node_counts):
        g = 0
        for tp in sorted(counts, reverse=True):
            for _ in range(int(counts[tp])):
                if g + tp > cluster.gpus_per_node:
                    raise ValueError(f"node {n}: {dict(counts)} needs more than {cluster.gpus_per_node} GPUs")
                out.append(
                    InstanceSpec(f"{prefix}-{n}-{g}", tp, n, tuple(range(g, g + tp)), cluster.max_batch_tokens[tp])
                )
                g += tp
    return out


def build_plan(
    placement: Placement,
    existing: Sequence[InstanceSpec],
    cluster: ClusterConfig,
    counts: dict[int, int],
    batch: dict[int, int],
    objective: float | None,
    current_objective: float | None,
    reason: str,
) -> ReconfigPlan:
    kept = set(placement.keep)
    old = [e for e in existing if e.instance_id not in kept]
    stopped: set[str] = set()
    steps: list[PlanStep] = []

    # Launches on free GPUs first: capacity grows before any instance is drained.
    def blockers(slot) -> list[str]:
        return [
            e.instance_id
            for e in old
            if e.node == slot.node and set(e.gpus) & set(slot.gpus) and e.instance_id not in stopped
        ]

    for slot in sorted(placement.launch, key=lambda s: (bool(blockers(s)), s.node, s.gpus)):
        stop = blockers(slot)
        stopped.update(stop)
        spec = InstanceSpec(
            f"tp{slot.tp}-n{slot.node}-g{slot.gpus[0]}-{next(_ids)}",
            slot.tp,
            slot.node,
            slot.gpus,
            cluster.max_batch_tokens[slot.tp],
        )
        steps.append(PlanStep(spec, tuple(stop)))
    return ReconfigPlan(tuple(steps), tuple(placement.keep), counts, batch, objective, current_objective, reason)
