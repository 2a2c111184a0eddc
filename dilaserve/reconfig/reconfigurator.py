"""Reconfiguration: monitor -> stage 1 -> improvement trigger -> stage 2 -> payback check -> plan.

A plan must not make things worse: it is applied only when it beats the running cluster by
the trigger, carries the arrivals at the lowest threshold with headroom, and repays the
capacity it takes offline while it executes (see :class:`ReconfigConfig`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from dilaserve.cluster.base import InstanceSpec
from dilaserve.control.request import TrackedRequest
from dilaserve.control.step_law import step_split
from dilaserve.profile.types import LatencyProfile
from dilaserve.reconfig.config import ClusterConfig, MonitorConfig, ReconfigConfig
from dilaserve.reconfig.forecast import (
    forecast_rate,
    holding_time_s,
    out_of_reach,
    reach_node_counts,
    tiers_out_of_reach,
)
from dilaserve.reconfig.monitor import RequestClass, WorkloadMonitor
from dilaserve.reconfig.plan import ReconfigPlan, all_tp1_node_counts, build_plan, node_counts_of
from dilaserve.reconfig.stage1 import (
    CapacityPlan,
    CapacityProblem,
    capacity_rps,
    check_capacity_plan,
    solve_capacity,
    step_latency_table,
)
from dilaserve.reconfig.stage2 import solve_placement

log = logging.getLogger(__name__)


class Reconfigurator:
    def __init__(
        self,
        cluster: ClusterConfig,
        profile: LatencyProfile,
        config: ReconfigConfig = ReconfigConfig(),
        monitor: WorkloadMonitor | None = None,
    ):
        self.cluster, self.profile, self.config = cluster, profile, config
        self.monitor = monitor or WorkloadMonitor(MonitorConfig())
        missing = [d for d in cluster.tp_degrees if not profile.has(d)]
        if missing:
            log.error(
                "reconfig: profile %r lacks TP degrees %s; planning with TP %s only. Profile them "
                "to let the planner use them",
                profile.name,
                missing,
                [d for d in cluster.tp_degrees if profile.has(d)],
            )
        self.degrees = tuple(d for d in cluster.tp_degrees if profile.has(d))

    @property
    def max_batch_tokens(self) -> int:
        return max(self.cluster.max_batch_tokens[d] for d in self.degrees) if self.degrees else 0

    def observe(self, req: TrackedRequest, now: float) -> None:
        self.monitor.observe(now, req.state.prompt_len, req.state.gen_length, req.slo, req.priority)

    def problem(self, classes: Sequence[RequestClass]) -> CapacityProblem:
        thresholds = tuple(sorted(self.config.tokens_per_step))
        total = sum(k.rate for k in classes)
        mean_tokens = sum(k.rate * k.tokens for k in classes) / total
        cfg = self.config
        rec_tokens = fed = None
        if cfg.block_causal and cfg.block_length > 1:
            # The prefill runs the prompt and first block; a block step feeds the block plus
            # the appends' share, at the lowest threshold (fewest steps: the most appends per step).
            prompt = sum(k.rate * k.prompt_tokens for k in classes) / total
            gen = max(mean_tokens - prompt, float(cfg.block_length))
            steps = gen / max(cfg.tokens_per_step.values())
            split = step_split(steps, prompt, gen, cfg.block_length, block_causal=True)
            rec_tokens, fed = split.recompute_tokens, split.fed_per_cache_step
        cache, recompute = step_latency_table(
            self.profile, self.cluster, self.degrees, mean_tokens, cfg.block_length, rec_tokens, fed
        )
        return CapacityProblem(
            classes=tuple(classes),
            thresholds=thresholds,
            tokens_per_step=tuple(self.config.tokens_per_step[t] for t in thresholds),
            degrees=self.degrees,
            nodes=self.cluster.nodes,
            gpus_per_node=self.cluster.gpus_per_node,
            latency=cache,
            slack_weight=self.config.slack_weight,
            recompute_latency=recompute,
            block_length=self.config.block_length,
            block_causal=self.config.block_causal,
        )

    def _stage1(self, pb: CapacityProblem, what: str) -> CapacityPlan | None:
        plan = solve_capacity(pb, self.config.time_limit_s, self.config.tiebreak_time_s)
        if plan is None:
            return None
        problems = check_capacity_plan(pb, plan)
        if problems:
            log.error("reconfig: stage-1 solution for the %s violates %s; discarding it", what, problems)
            return None
        return plan

    def capacity_plan(self, classes: Sequence[RequestClass]) -> CapacityPlan | None:
        """Stage 1 alone for ``classes`` (None when infeasible or unsolved): e.g. the plan a
        static cluster would be built to for a workload's mean load."""
        return self._stage1(self.problem(classes), "given classes") if classes and self.degrees else None

    def carried_rps(self, now: float, specs: Sequence[InstanceSpec]) -> float:
        """Requests/s of the recent class mix that a cluster of ``specs`` carries at the
        lowest threshold (:func:`capacity_rps`); 0 with no recent arrivals."""
        classes = self.monitor.classes(now)
        if not classes or not specs or not self.degrees:
            return 0.0
        return capacity_rps(self.problem(classes), dict(Counter(s.tp for s in specs)))

    def peak_rps(self, now: float, home: Sequence[InstanceSpec]) -> float:
        """The rate a plan must hold: ``ReconfigConfig.peak_rps``, or what the cluster the
        server started with (``home``) carries of the recent class mix (:meth:`carried_rps`)."""
        return self.config.peak_rps if self.config.peak_rps is not None else self.carried_rps(now, home)

    def propose(self, now: float, existing: Sequence[InstanceSpec]) -> ReconfigPlan | None:
        """A plan to apply now, or None to keep the current configuration."""
        classes = self.monitor.classes(now)
        if not classes or not self.degrees:
            log.info("reconfig at %.1fs: no recent arrivals (or no usable TP degree); keeping the cluster", now)
            return None
        pb = self.problem(classes)
        current_counts = dict(Counter(e.tp for e in existing))
        target = self._stage1(pb, "target")
        current = self._stage1(replace(pb, fixed_counts=current_counts), "current cluster") if existing else None
        cur_obj = current.objective if current else None
        current_rps = capacity_rps(pb, current_counts)
        if target is None:
            node_counts = all_tp1_node_counts(self.cluster, self.degrees)
            counts = dict(Counter(d for nc in node_counts for d, n in nc.items() for _ in range(n)))
            if counts == current_counts:
                # Nothing to change (an idle all-TP-1 cluster whose window holds an SLO no layout
                # meets): a line per tick, not a warning.
                log.info(
                    "reconfig at %.1fs: stage 1 infeasible or unsolved; keeping the all TP-%d cluster",
                    now,
                    min(self.degrees),
                )
                return None
            log.warning(
                "reconfig at %.1fs: stage 1 infeasible or unsolved; falling back to all TP-%d", now, min(self.degrees)
            )
            if existing and capacity_rps(pb, counts) <= current_rps:
                log.info(
                    "reconfig at %.1fs: the fallback %s carries no more than the running %s; keeping the cluster",
                    now,
                    counts,
                    current_counts,
                )
                return None
            batch, obj, reason = {}, None, "fallback: stage 1 infeasible"
        else:
            counts = {d: n for d, n in target.counts.items() if n}
            if counts == current_counts:
                log.info("reconfig at %.1fs: the current cluster is already the best plan", now)
                return None
            if cur_obj is not None and target.objective < cur_obj * (1 + self.config.min_improvement):
                log.info(
                    "reconfig at %.1fs: objective %.4f vs current %.4f is under the %.0f%% trigger; "
                    "keeping the cluster",
                    now,
                    target.objective,
                    cur_obj,
                    100 * self.config.min_improvement,
                )
                return None
            need = pb.total_rate * (1 + self.config.capacity_headroom)
            target_rps = capacity_rps(pb, counts)
            if target_rps < need:
                log.info(
                    "reconfig at %.1fs: %s carries %.2f req/s at the lowest threshold, under the %.2f "
                    "req/s observed with headroom; keeping the cluster",
                    now,
                    counts,
                    target_rps,
                    need,
                )
                return None
            node_counts, batch, obj = list(target.node_counts), target.batch, target.objective
            reason = "improvement" if cur_obj is not None else "current cluster cannot meet the SLOs"
        plan = self.plan_to(node_counts, existing, batch, obj, cur_obj, reason)
        plan = replace(plan, transition_s=(self._drain_s(pb) if plan.stops else 0.0) + self.config.launch_time_s)
        if cur_obj is not None and obj is not None and not self._pays_back(pb, plan, existing, obj / cur_obj - 1):
            return None
        log.info(
            "reconfig at %.1fs: %s -> %s (%s): keep %d, launch %d, stop %d",
            now,
            current_counts,
            counts,
            reason,
            len(plan.keep),
            len(plan.steps),
            len(plan.stops),
        )
        return plan

    def tick(
        self, now: float, existing: Sequence[InstanceSpec], home: Sequence[InstanceSpec], lowest: float | None = None
    ) -> ReconfigPlan | None:
        """The plan of a reconfiguration tick: made ahead (:meth:`propose_ahead`) where a
        tier is out of ``home``'s reach at ``lowest`` (:meth:`needs_reach`), else for the
        load just seen (:meth:`propose`). Elsewhere nothing changes: planning ahead acts only
        where the layout must change with the load."""
        if home and self.needs_reach(now, home, lowest):
            return self.propose_ahead(now, existing, home, lowest)
        return self.propose(now, existing)

    def replay_terms(self, now: float, plan: ReconfigPlan, home: Sequence[InstanceSpec]) -> tuple[float, float]:
        """(the share of ``plan``'s expected hold its transition takes, the rate its layout
        must hold), for the replay that judges it: a plan made ahead brings its hold and its
        forecast peak; any other holds ``ReconfigConfig.lifetime_s`` and must hold
        :meth:`peak_rps`."""
        share = plan.transition_s / (plan.hold_s or self.config.lifetime_s)
        return share, plan.peak_rps if plan.peak_rps is not None else self.peak_rps(now, home)

    def needs_reach(self, now: float, home: Sequence[InstanceSpec], lowest: float | None = None) -> bool:
        """Whether most requests of an SLO tier of the recent arrivals are out of reach of
        ``home``'s TP degrees (their SLO below their time alone there at ``lowest``, the
        lowest threshold the controller may run; None: the lowest candidate) while a degree
        the cluster may run reaches most of them: the layout must change with the load, and
        plans are made ahead (:meth:`propose_ahead`). Judged request by request
        (:func:`tiers_out_of_reach`)."""
        requests = self.monitor.requests(now)
        if not requests or not self.degrees:
            return False
        table = self.config.tokens_per_step
        above = [t for t in sorted(table) if lowest is None or t >= lowest - 1e-9]
        per_step = table[above[0]] if above else min(table.values())
        home_degrees = sorted({s.tp for s in home} & set(self.degrees))
        cfg = self.config
        return bool(
            tiers_out_of_reach(
                requests, self.profile, home_degrees, self.degrees, per_step, cfg.block_length, cfg.block_causal
            )
        )

    def forecast(self, now: float) -> tuple[float, float]:
        """(the line's rate now, the forecast mean rate over the next interval, as long as
        the monitor's window, or as the arrivals seen so far where they span less), from a
        line through the window's arrival counts (:func:`forecast_rate`): a line carried
        further than the evidence behind it would plan for its noise (early in a run, 30 s
        of a quiet phase's bursts carried 60 s on read as twice its rate)."""
        arrivals, window = self.monitor.arrivals(now), self.monitor.config.window_s
        return forecast_rate(arrivals, now, window, 0.0), forecast_rate(arrivals, now, window, self.horizon_s(now))

    def horizon_s(self, now: float) -> float:
        """How far :meth:`forecast` carries its line: the monitor's window, or the time since
        the first arrival in it where that is shorter."""
        arrivals, window = self.monitor.arrivals(now), self.monitor.config.window_s
        return min(window, now - arrivals[0]) if arrivals else window

    def propose_ahead(
        self,
        now: float,
        existing: Sequence[InstanceSpec],
        home: Sequence[InstanceSpec],
        lowest: float | None = None,
    ) -> ReconfigPlan | None:
        """A plan for the coming interval, or None to keep the cluster. Stage 1 plans each
        SLO tier apart for the most the forecast rate reaches within the plan's lifetime; a
        plan's expected hold is the time until the forecast outgrows what it carries at the
        lowest threshold, and its gain over that hold must repay its transition (the
        scheduler's replay then judges it at the forecast's peak). Classes no degree
        reaches at ``lowest`` are left out: admission refuses their requests, and planning
        for them would find no plan. Where stage 1 would give the tier out of reach other
        than the nodes of the fastest degree that the forecast leaves room for and one wave
        turns back (:meth:`reach_layout`), that layout is the plan. Where neither carries
        the forecast, the way back to ``home``."""
        classes = self.monitor.classes(now, by_tier=True)
        if not classes or not self.degrees:
            return None
        rate_now, ahead = self.forecast(now)
        lifetime, horizon = self.config.lifetime_s, self.horizon_s(now)
        observed = sum(k.rate for k in classes) / (1 + self.monitor.config.safety_margin)
        # The rate just seen or the next interval's, whichever is more (the monitor's safety
        # margin stays on top): the window's mean after a fall still holds the peak it fell
        # from, and planning for the line's far end would plan for its noise.
        peak = max(self.recent_rate(now), ahead)
        scale = peak / observed if observed > 0 else 1.0
        beyond = set(out_of_reach(self.problem(classes), self.degrees, lowest))
        classes = [k for i, k in enumerate(classes) if i not in beyond]
        if not classes:
            return None
        pb = self.problem([replace(k, rate=k.rate * max(scale, 1e-9)) for k in classes])
        current_counts = dict(Counter(e.tp for e in existing))
        target = self._stage1(pb, "forecast")
        reach = self.reach_layout(pb, home, lowest)
        fast = max(self.degrees)
        current = self._stage1(replace(pb, fixed_counts=current_counts), "current cluster") if existing else None
        cur_obj = current.objective if current else None
        # The reach layout where stage 1 gives the fast degree other than the nodes the
        # forecast leaves room for (fewer), or than one wave turns back (more).
        if reach is not None and (target is None or sum(n.get(fast, 0) for n in reach) != target.counts.get(fast, 0)):
            node_counts, batch, obj = reach, {}, None
            counts = dict(Counter(d for nc in reach for d, n in nc.items() for _ in range(n)))
        elif target is None:
            plan = self.plan_home(now, existing, home)
            return None if plan is None else replace(plan, peak_rps=peak, reason="ahead: no plan carries the forecast")
        else:
            node_counts, batch, obj = list(target.node_counts), target.batch, target.objective
            counts = {d: n for d, n in target.counts.items() if n}
            if cur_obj is not None and obj < cur_obj * (1 + self.config.min_improvement):
                return None
            if capacity_rps(pb, counts) < pb.total_rate * (1 + self.config.capacity_headroom):
                return None
        if counts == current_counts:
            return None
        # Held until the forecast line outgrows the plan, for no longer than a plan's lifetime.
        hold = holding_time_s(rate_now, ahead, horizon, capacity_rps(pb, counts), limit_s=lifetime)
        plan = self.plan_to(node_counts, existing, batch, obj, cur_obj, f"ahead: {peak:.1f} req/s forecast")
        transition = (self._drain_s(pb) if plan.stops else 0.0) + self.config.launch_time_s
        log.info("reconfig at %.1fs: ahead %s -> %s, holds %.0fs of %.0fs", now, current_counts, counts, hold, lifetime)
        if hold <= transition:
            return None
        return replace(plan, transition_s=transition, hold_s=hold, peak_rps=peak)

    def recent_rate(self, now: float) -> float:
        """Arrivals per second over the last third of the monitor's window (over what has
        passed of it early in a run): the rate a plan made now starts at."""
        arrivals, window = self.monitor.arrivals(now), self.monitor.config.window_s / 3
        if not arrivals:
            return 0.0
        span = min(window, max(now - arrivals[0], 1.0))
        return sum(t > now - span for t in arrivals) / span

    def reach_layout(
        self, pb: CapacityProblem, home: Sequence[InstanceSpec], lowest: float | None = None
    ) -> list[dict[int, int]] | None:
        """Per node, the layout with the most nodes of the fastest degree (the rest of
        ``home``'s lowest degree) that carries ``pb``'s rate with the capacity headroom at
        the lowest threshold the controller may run (:func:`reach_node_counts`), with no
        more fast nodes than one wave of a rolling update rebuilds (:meth:`wave_nodes`),
        unless a layout with more carries ``ReconfigConfig.reach_reserve`` times that rate;
        None where the cluster has no faster degree or no such node fits.

        The way home comes at a rise, when every second on the fast layout's throughput
        misses requests: a fast part the offline budget turns back at once takes one launch
        time to undo, where the whole cluster took two waves. The nodes left at ``home``'s
        degree also keep the other tiers on the instances that serve them best."""
        fast = max(self.degrees)
        home_degrees = sorted({s.tp for s in home} & set(self.degrees))
        if not home_degrees or home_degrees[0] >= fast:
            return None
        usable = [t for t in pb.thresholds if lowest is None or t >= lowest - 1e-9]
        need = pb.total_rate * (1 + self.config.capacity_headroom)
        args = (pb, self.cluster.gpus_per_node, home_degrees[0], fast)
        threshold = usable[0] if usable else None
        one_wave = reach_node_counts(*args, need, threshold, most_nodes=self.wave_nodes())
        reserve = self.config.reach_reserve
        if reserve is None or one_wave is None:
            return one_wave
        # Past one wave only with the reserve: the rate must grow that much before the way
        # home has to start, time for the waves past the first to turn back one by one.
        wide = reach_node_counts(*args, need * reserve, threshold)
        if wide is not None and sum(fast in node for node in wide) > sum(fast in node for node in one_wave):
            return wide
        return one_wave

    def offline_gpus(self) -> int:
        """The GPUs a plan may hold offline at once (``ReconfigConfig.max_offline_share`` of
        the cluster's), at least one."""
        return max(1, int(self.config.max_offline_share * self.cluster.nodes * self.cluster.gpus_per_node))

    def wave_nodes(self) -> int:
        """Whole nodes one wave of a rolling update takes offline at once, at least one."""
        return max(1, self.offline_gpus() // self.cluster.gpus_per_node)

    def transition_cost_s(self, pb: CapacityProblem, plan: ReconfigPlan, existing: Sequence[InstanceSpec]) -> float:
        """Cluster-seconds of capacity ``plan`` takes offline: each stopped instance's share of
        the running cluster's capacity, from its drain until its replacement is ready."""
        total = capacity_rps(pb, dict(Counter(e.tp for e in existing)))
        if total <= 0:
            return 0.0
        tp_of = {e.instance_id: e.tp for e in existing}
        lost = sum(capacity_rps(pb, {tp_of[i]: 1}) for i in plan.stops if i in tp_of)
        return lost / total * (self._drain_s(pb) + self.config.launch_time_s)

    def _drain_s(self, pb: CapacityProblem) -> float:
        """Seconds a stopped instance takes to drain: the configured time, else the tightest
        class SLO (its requests finish within their SLO when the plan is sound)."""
        cfg = self.config
        if cfg.drain_time_s is not None:
            return cfg.drain_time_s
        return min((k.slo_s for k in pb.classes if np.isfinite(k.slo_s)), default=0.0)

    def _pays_back(
        self, pb: CapacityProblem, plan: ReconfigPlan, existing: Sequence[InstanceSpec], gain: float
    ) -> bool:
        """Does the relative objective ``gain``, held for the plan's lifetime, repay the
        capacity lost while it executes? Both sides are in cluster-seconds."""
        cost = self.transition_cost_s(pb, plan, existing)
        earned = gain * self.config.lifetime_s
        if earned <= cost:
            log.info(
                "reconfig: the plan's %.1f%% gain over %.0fs (%.1f cluster-s) does not repay the %.1f "
                "cluster-s its drains and launches cost; keeping the cluster",
                100 * gain,
                self.config.lifetime_s,
                earned,
                cost,
            )
            return False
        return True

    def plan_home(
        self, now: float, existing: Sequence[InstanceSpec], home: Sequence[InstanceSpec], node_by_node: bool = False
    ) -> ReconfigPlan | None:
        """Stage 2 alone, back to the layout ``home`` (the one the cluster started with), its
        transition priced as a proposal's; None where the cluster already has ``home``'s TP
        degrees on every node.

        ``node_by_node``: the plan rebuilds one node at a time (within the offline budget). The
        way home at a rise is for throughput, and the peak needs every instance the cluster
        can keep: the fast nodes not yet rebuilt go on serving, where rebuilding them all at
        once took half the cluster offline as the peak arrived. Its check still prices one
        wave: the same GPU-seconds offline, over half the time."""
        if self.at_home(existing, home):
            return None
        target = node_counts_of(home, self.cluster.nodes)
        classes = self.monitor.classes(now)
        drain = self._drain_s(self.problem(classes)) if classes else (self.config.drain_time_s or 0.0)
        plan = self.plan_to(target, existing, reason="back to the starting layout, which replays better")
        offline = min(self.offline_gpus(), self.cluster.gpus_per_node) if node_by_node else None
        return replace(
            plan, transition_s=(drain if plan.stops else 0.0) + self.config.launch_time_s, max_offline_gpus=offline
        )

    def at_home(self, existing: Sequence[InstanceSpec], home: Sequence[InstanceSpec]) -> bool:
        """Whether ``existing`` runs ``home``'s TP degrees on every node."""
        return node_counts_of(existing, self.cluster.nodes) == node_counts_of(home, self.cluster.nodes)

    def plan_to(
        self,
        node_counts: Sequence[dict[int, int]],
        existing: Sequence[InstanceSpec],
        batch: dict | None = None,
        objective: float | None = None,
        current_objective: float | None = None,
        reason: str = "operator request",
    ) -> ReconfigPlan:
        """Stage 2 only: the least disruptive plan from ``existing`` to ``node_counts``
        (per node, instances per TP degree), e.g. for an operator-chosen configuration."""
        counts = dict(Counter(d for nc in node_counts for d, n in nc.items() for _ in range(n)))
        placement = solve_placement(
            self.cluster.nodes, self.cluster.gpus_per_node, list(node_counts), existing, self.config.time_limit_s
        )
        return build_plan(placement, existing, self.cluster, counts, batch or {}, objective, current_objective, reason)
