"""Configuration of the cluster shape, the workload monitor and the reconfigurator."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from dilaserve.control.step_law import StepLaw, typical_tokens_per_step
from dilaserve.control.thresholds import CANDIDATE_THRESHOLDS


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
    """How and when the cluster is re-planned, and when a new plan is worth applying.

    A plan is applied only when all of these hold (otherwise the cluster is kept):

    * its stage-1 objective beats the running configuration's by ``min_improvement``;
    * with every step at the lowest candidate threshold (the most the threshold controller
      can squeeze out), its capacity carries the monitor's arrival rates times
      ``1 + capacity_headroom``;
    * what it gains repays what it costs: its relative objective gain over
      ``plan_lifetime_s`` exceeds the share of the running cluster's capacity it takes
      offline while instances drain (``drain_time_s``) and new ones load
      (``launch_time_s``), in cluster-seconds.

    Attributes:
        interval_s: seconds between reconfiguration ticks in serving (the simulator ticks
            at ``SimConfig.reconfig_tick_s``), and a plan's lifetime unless
            ``plan_lifetime_s`` is set.
        min_improvement: apply a new plan only if its objective beats the current
            configuration's by at least this fraction (0.10 = 10%).
        time_limit_s: wall-clock limit for each ILP solve.
        tokens_per_step: effective tokens per step ``T_c = B / S_c`` at each candidate
            threshold, ``S_c`` the expected steps per block of the step law (see
            :meth:`with_step_law`); from the recorded step dynamics or the
            threshold-quality table.
        slack_weight: weight of the SLO-slack tie-break next to the average threshold;
            keep it small so slack never outweighs a threshold difference.
        block_length: block length of the served model (0 when caching is off); each block
            costs one recompute step, the rest of its steps are cache steps.
        block_causal: the served model is block diffusion: a request's one recompute step is
            its prefill, every other step a block step (taken from the step law at start-up).
        tiebreak_time_s: time budget of stage 1's second solve (most SLO slack among plans
            with the best average threshold), which starts from the first solve's optimum.
            Both solves normally prove optimality well within their limits (``python -m
            dilaserve.bench control`` reports ``ilp_optimal``); the budget is a safety net:
            the tie-break's plan replaces the first solve's only when it has more slack, so
            one that runs out costs nothing but the tie-break.
        capacity_headroom: extra arrival rate (fraction) a plan must carry at the lowest
            threshold on top of the monitor's rates (which already include its safety
            margin); 0.1 = 10% more.
        launch_time_s: seconds from launching an instance to its being ready (loading the
            weights); the simulator sets its instances' launch time apart, in its backend.
        drain_time_s: seconds a drained instance takes to finish or hand off its requests
            before it can stop; None: the tightest class SLO (requests in flight finish
            within their SLO when the plan is sound).
        plan_lifetime_s: how long a plan is expected to stay in force, over which its gain
            must repay the transition; None: ``interval_s`` (the next tick may re-plan).
        max_offline_share: the largest share of the cluster's GPUs a plan may hold offline
            at once (draining, stopping or loading), as a rolling update's
            ``maxUnavailable``: steps start in order while they fit (one always may). A
            plan that touches every node then takes a few launch times, not one per node;
            the capacity-seconds it takes offline are the same either way.
        reach_reserve: a plan made ahead gives the fast degree at most the nodes one wave of a
            rolling update turns back (``max_offline_share``), so that the way home at a rise
            takes one launch; more only where the layout with more fast nodes carries this
            many times the forecast peak (with ``capacity_headroom``), at the lowest
            threshold. The rate must then grow this much before the way home has to begin,
            and each wave past the first turns back as the rising forecast outgrows it. Where
            the busiest load is itself quiet, one wave kept half the cluster on a degree the
            tier out of reach cannot use (docs/architecture.md, "Capacity at an SLO"). None:
            never more than one wave.
        peak_rps: the request rate a plan must hold (requests/s). With the operating-point
            tuner on, a plan is also replayed on the last window's arrivals compressed to
            this rate, and refused where its layout loses there: a plan outlives the load it
            was made for. None: the rate the cluster the server started with carries at the
            lowest threshold (the most it was built to take); an operator who knows the peak
            gives it here.
    """

    interval_s: float = 300.0
    min_improvement: float = 0.10
    time_limit_s: float = 5.0
    tokens_per_step: Mapping[float, float] = field(
        default_factory=lambda: typical_tokens_per_step(CANDIDATE_THRESHOLDS)
    )
    slack_weight: float = 1e-3
    block_length: int = 32
    block_causal: bool = False
    tiebreak_time_s: float = 3.0
    capacity_headroom: float = 0.1
    launch_time_s: float = 20.0
    drain_time_s: float | None = None
    plan_lifetime_s: float | None = None
    max_offline_share: float = 0.5
    reach_reserve: float | None = 2.0
    peak_rps: float | None = None

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
        if self.block_length > 0 and any(v > self.block_length for v in self.tokens_per_step.values()):
            raise ValueError(
                f"ReconfigConfig.tokens_per_step {self.tokens_per_step} exceeds block_length={self.block_length}: "
                "a block takes at least one step; build the table with with_step_law(StepLaw...)"
            )
        if not 0 <= self.slack_weight < 0.1:
            raise ValueError("ReconfigConfig.slack_weight must be in [0, 0.1): it is only a tie-break")
        if self.tiebreak_time_s <= 0:
            raise ValueError("ReconfigConfig.tiebreak_time_s must be positive seconds (try 3)")
        if self.block_length < 0:
            raise ValueError("ReconfigConfig.block_length must be >= 0 (0 = caching off)")
        if self.capacity_headroom < 0:
            raise ValueError(
                f"ReconfigConfig.capacity_headroom={self.capacity_headroom} must be >= 0: it is the extra "
                "arrival rate a plan must carry (0.1 = 10% more than the monitor measured)"
            )
        if self.launch_time_s < 0:
            raise ValueError(
                f"ReconfigConfig.launch_time_s={self.launch_time_s} must be >= 0 seconds: the time a new "
                "instance takes to load its weights (SimBackendConfig.launch_time_s in the simulator)"
            )
        if not 0 < self.max_offline_share <= 1:
            raise ValueError(
                f"ReconfigConfig.max_offline_share={self.max_offline_share} must lie in (0, 1]: the share of "
                "the cluster's GPUs a plan may hold offline at once (0.5 = half)"
            )
        if self.reach_reserve is not None and not self.reach_reserve >= 1:
            raise ValueError(
                f"ReconfigConfig.reach_reserve={self.reach_reserve} must be >= 1: how many times the forecast "
                "peak a layout with more fast nodes than one wave must carry (2.0), or None for one wave at most"
            )
        if self.peak_rps is not None and self.peak_rps <= 0:
            raise ValueError(
                f"ReconfigConfig.peak_rps={self.peak_rps} must be a positive request rate (requests/s), "
                "or None for the rate the starting cluster carries"
            )
        for name in ("drain_time_s", "plan_lifetime_s"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise ValueError(f"ReconfigConfig.{name}={v} must be >= 0 seconds, or None for the default")

    def with_step_law(self, law: StepLaw) -> ReconfigConfig:
        """This config with ``T_c``, the block length and the family of ``law``."""
        return replace(
            self,
            tokens_per_step=law.tokens_per_step_at(law.thresholds),
            block_length=law.block_length,
            block_causal=law.block_causal,
        )

    @property
    def lifetime_s(self) -> float:
        return self.interval_s if self.plan_lifetime_s is None else self.plan_lifetime_s
