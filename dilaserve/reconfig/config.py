"""Configuration of the cluster shape, the workload monitor and the reconfigurator."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class ClusterConfig:
    """The GPUs the cluster may use and how instances may be shaped.

    Attributes:
        nodes: number of nodes.
        gpus_per_node: GPUs per node (a TP group never spans nodes).
        tp_degrees: allowed tensor-parallel degrees; each must be a power of two dividing
            ``gpus_per_node``, so aligned TP groups always pack a node.
        max_batch_tokens: batch limit (tokens) of an instance per TP degree.
        batch_options: batch sizes (requests per batch) stage 1 may choose from.
    """

    nodes: int = 4
    gpus_per_node: int = 4
    tp_degrees: tuple[int, ...] = (1, 2, 4)
    max_batch_tokens: Mapping[int, int] = field(default_factory=lambda: {1: 32768, 2: 65536, 4: 131072})
    batch_options: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tp_degrees", tuple(sorted(set(int(d) for d in self.tp_degrees))))
        object.__setattr__(self, "max_batch_tokens", {int(k): int(v) for k, v in self.max_batch_tokens.items()})
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ValueError(
                f"ClusterConfig needs at least one node and one GPU per node (got nodes={self.nodes}, "
                f"gpus_per_node={self.gpus_per_node})"
            )
        if not self.tp_degrees:
            raise ValueError("ClusterConfig.tp_degrees is empty: allow at least TP-1, e.g. (1,)")
        for d in self.tp_degrees:
            if d < 1 or d & (d - 1) or self.gpus_per_node % d:
                raise ValueError(
                    f"ClusterConfig.tp_degrees has {d}: each TP degree must be a power of two that "
                    f"divides gpus_per_node={self.gpus_per_node}; drop it or change the node size"
                )
        missing = [d for d in self.tp_degrees if d not in self.max_batch_tokens]
        if missing:
            raise ValueError(
                f"ClusterConfig.max_batch_tokens lacks TP degrees {missing}: give a batch limit "
                "(tokens) for every allowed TP degree"
            )
        if any(v <= 0 for v in self.max_batch_tokens.values()):
            raise ValueError(f"ClusterConfig.max_batch_tokens must be positive: {self.max_batch_tokens}")
        if not self.batch_options or any(b < 1 for b in self.batch_options):
            raise ValueError(f"ClusterConfig.batch_options {self.batch_options} must be positive request counts")

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class MonitorConfig:
    """How the workload monitor groups and counts requests.

    Attributes:
        input_edges: prompt-length bucket edges (tokens); ``k`` edges give ``k + 1`` buckets.
        output_edges: output-length bucket edges (tokens).
        window_s: arrival rates are measured over this trailing window (seconds).
        safety_margin: rates are inflated by this fraction so the plan has headroom for
            bursts (0.2 plans for 20% more traffic than measured).
    """

    input_edges: tuple[int, ...] = (256, 1024)
    output_edges: tuple[int, ...] = (128, 256, 512)
    window_s: float = 120.0
    safety_margin: float = 0.2

    def __post_init__(self) -> None:
        for name in ("input_edges", "output_edges"):
            edges = getattr(self, name)
            if list(edges) != sorted(set(edges)):
                raise ValueError(f"MonitorConfig.{name} {edges} must be strictly increasing")
        if self.window_s <= 0:
            raise ValueError(f"MonitorConfig.window_s={self.window_s} must be positive seconds (try 120)")
        if self.safety_margin < 0:
            raise ValueError(f"MonitorConfig.safety_margin={self.safety_margin} must be >= 0 (0.2 = 20% headroom)")


@dataclass(frozen=True)
class ReconfigConfig:
    """How and when the cluster is re-planned.

    Attributes:
        interval_s: seconds between reconfiguration ticks (every few minutes).
        min_improvement: apply a new plan only if its objective beats the current
            configuration's by at least this fraction (0.10 = 10%).
        time_limit_s: wall-clock limit for each ILP solve.
        tokens_per_step: mean tokens committed per step at each candidate threshold
            (T_c of stage 1), from the rollout tables.
        slack_weight: weight of the SLO-slack tie-break next to the average threshold;
            keep it small so slack never outweighs a threshold difference.
        block_length: block length of the served model (0 when caching is off); sets the
            mix of cache and recompute steps in the per-step latency stage 1 uses.
        tiebreak_time_s: time budget of stage 1's second solve (most SLO slack among plans
            with the best average threshold); its best plan so far is used when it runs out.
            Closing that solve's gap is the slow part of stage 1, and slack is only a tie-break.
    """

    interval_s: float = 300.0
    min_improvement: float = 0.10
    time_limit_s: float = 5.0
    tokens_per_step: Mapping[float, float] = field(
        default_factory=lambda: {0.5: 3.2, 0.6: 2.7, 0.7: 2.2, 0.8: 1.8, 0.9: 1.4}
    )
    slack_weight: float = 1e-3
    block_length: int = 32
    tiebreak_time_s: float = 0.3

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens_per_step", {float(k): float(v) for k, v in self.tokens_per_step.items()})
        if self.interval_s <= 0:
            raise ValueError(f"ReconfigConfig.interval_s={self.interval_s} must be positive seconds (try 300)")
        if self.min_improvement < 0:
            raise ValueError("ReconfigConfig.min_improvement must be >= 0 (0.10 = apply at >= 10% better)")
        if self.time_limit_s <= 0:
            raise ValueError("ReconfigConfig.time_limit_s must be positive: always bound the ILP solve time")
        if not self.tokens_per_step or any(v < 1 for v in self.tokens_per_step.values()):
            raise ValueError(
                f"ReconfigConfig.tokens_per_step {self.tokens_per_step} needs one entry per threshold, "
                "each >= 1 (a step commits at least one token)"
            )
        if not 0 <= self.slack_weight < 0.1:
            raise ValueError("ReconfigConfig.slack_weight must be in [0, 0.1): it is only a tie-break")
        if self.tiebreak_time_s <= 0:
            raise ValueError("ReconfigConfig.tiebreak_time_s must be positive seconds (try 0.3)")
        if self.block_length < 0:
            raise ValueError("ReconfigConfig.block_length must be >= 0 (0 = caching off)")
