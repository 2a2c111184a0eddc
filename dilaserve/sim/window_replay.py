"""The operating-point tuner's replay, on the simulator (docs/architecture.md, "Operating points").

A :class:`WindowReplay` answers the tuner's question "what goodput would each candidate
point have made on the last window's arrivals, on this cluster?" by running the window
through the simulator once per point: a sample of the arrivals on a slice of the layout
of the same share (or, with ``TunerConfig.compress``, compressed in time by its share onto
the whole layout), so each instance keeps its load; every candidate on the same
sample and the same replayed step outcomes (common random numbers, so the comparison is not
drowned in sampling noise); the sample depends on the window alone. The replayed policy is
the tuning policy itself with its point pinned, without tuning or reconfiguration.

A warm replay runs the window twice, back to back, and scores the second copy alone: the
first fills the batches and queues as the live cluster's are, where a replay from an empty
cluster would flatter a layout short of throughput (its queue has no time to build within
a window a few SLOs long).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import polars as pl

from dilaserve.cluster.base import InstanceSpec
from dilaserve.control.operating_point import OperatingPoint
from dilaserve.control.predictions import StepCalibration
from dilaserve.control.step_time import scale_profile
from dilaserve.control.thresholds import pinned_threshold
from dilaserve.predict.row_memo import RowMemo
from dilaserve.schedule.policies import SchedulerPolicy
from dilaserve.schedule.window import Bound, StepFactors, WindowArrival, repeat_period
from dilaserve.sim.metrics import good
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.run import REQUEST_COLUMNS, BaseSimulator, SimConfig
from dilaserve.sim.setting import ClusterSetting, Predictors
from dilaserve.sim.workload import Workload, WorkloadRequest


def layout_slice(layout: Sequence[InstanceSpec], share: float) -> list[InstanceSpec]:
    """About ``share`` of the instances, spread evenly over the layout ordered by TP degree,
    so the slice keeps the layout's TP mix (at least one instance)."""
    ordered = sorted(layout, key=lambda s: (s.tp, s.node, s.gpus))
    keep = max(1, round(len(ordered) * share))
    picks = sorted({int(round(i)) for i in np.linspace(0, len(ordered) - 1, keep)})
    return [ordered[i] for i in picks]


def gpu_count(layout: Sequence[InstanceSpec]) -> int:
    return sum(len(s.gpus) for s in layout)


class WindowReplay:
    """Args:
    setting: the simulated cluster (its control settings and profile).
    progress: the replay whose step law and quality table the window is replayed on.
    predictors: the policy's predictors.
    config: the simulator's config (its ``tuner`` field sets the sample).
    policy: the tuning policy; replayed pinned, without tuning or reconfiguration.
    """

    def __init__(
        self,
        setting: ClusterSetting,
        progress: ReplayProgress,
        predictors: Predictors,
        config: SimConfig,
        policy: SchedulerPolicy,
    ):
        self.setting = setting
        # Candidates and overlapping windows ask the predictor the same rows again.
        learned = predictors.learned
        if learned is not None and not isinstance(learned, RowMemo):
            predictors = replace(predictors, learned=RowMemo(learned))
        self.predictors = predictors
        self.table, self.quality = progress.table, progress.quality_table
        self.seed, self.block_causal = progress.seed, progress.block_causal
        self.sample = config.tuner.sample
        self.config = config
        # The replay steps exactly as the profile says (``step_time_factor`` 1 below): its
        # control plane has no step time to learn, and learning it costs a fifth of a replay.
        self.policy = replace(policy, name=f"{policy.name}:replay", tune=False, reconfig=False, learn_step_time=False)
        self.calls = 0

    def __call__(
        self,
        arrivals: Sequence[WindowArrival],
        layout: Sequence[InstanceSpec],
        points: Sequence[OperatingPoint],
        sample: float | None = None,
        warm: bool = False,
        keep: int = 1,
        floor: float | None = None,
        calibration: StepCalibration | None = None,
        step_factors: StepFactors = (),
    ) -> list[float]:
        """Each point's goodput on the window; ``keep``: only the ``keep`` best need their
        own score (a screen's finalists), the others may stop early with a bound below it;
        ``floor``: every point may stop early with a bound below ``floor``; ``calibration``:
        the replayed step predictions start from it (the live control plane's);
        ``step_factors``: the replay steps and prices this much slower than the profile
        (what the live control plane has learned of its machine)."""
        self.calls += 1
        asked = self.sample if sample is None else sample
        # Compressed: the whole cluster, under the sampled arrivals at the window's rate.
        compress = self.config.tuner.compress and asked < 1
        part = list(layout) if compress else layout_slice(layout, asked)
        # Arrivals are sampled by the slice's share of the GPUs, not of the instances: one
        # TP-4 instance does the work of about four GPUs, and a slice that kept it while
        # sampling arrivals by instance count would replay a lighter load than the layout's.
        share = asked if compress else gpu_count(part) / gpu_count(layout)
        # The sample, and the step outcomes (seeded by request id), come from the window
        # itself, not from how many replays ran before: a plan checked between two tunings
        # must not change what the next tuning replays (runs with and without
        # reconfiguration then tune alike until a plan is applied).
        rng = np.random.default_rng((self.seed, len(arrivals), int(arrivals[-1].arrival * 1000) if arrivals else 0))
        kept = [a for a, u in zip(arrivals, rng.random(len(arrivals)).tolist()) if u < share]
        if not kept:
            return [0.0] * len(points)
        t0 = kept[0].arrival
        if compress:
            kept = [replace(a, arrival=t0 + (a.arrival - t0) * share) for a in kept]
        # The warm-up copy ends one mean gap before the scored copy starts: the rate runs on.
        span = repeat_period(kept) if warm else 0.0
        copies = [("warmup", 0.0), ("window", span)] if warm else [("window", 0.0)]
        wl = Workload(
            "window",
            [
                WorkloadRequest(
                    f"{name}-{i}",
                    a.arrival - t0 + shift,
                    a.prompt_tokens,
                    a.output_tokens,
                    priority=a.priority,
                    slo_s=a.slo_s,
                    min_threshold=a.min_threshold,
                )
                for name, shift in copies
                for i, a in enumerate(kept)
            ],
        )
        slo = max(a.slo_s for a in kept)
        scored_copy = copies[-1][1]
        deadlines = {f"window-{i}": a.arrival - t0 + scored_copy + a.slo_s for i, a in enumerate(kept)}
        # A request still running this long after the window's last arrival is a miss anyway.
        # The window is replayed on healthy instances: the run's scheduled failures name
        # instances at times of the run, not of the window.
        # It replays on the profile as the live control plane has learned it
        # (``step_factors``): how much slower the simulated machine steps is for the
        # control plane to learn, and for its replay to take from it, not to know.
        config = replace(
            self.config,
            drain_limit_s=4 * slo + 1.0,
            backend=replace(self.config.backend, failures=()),
            step_time_factor=1.0,
        )
        base = replace(self.setting, initial_layout=tuple(part))
        if step_factors:
            # The replayed instances step, and its control plane prices, on the learned machine.
            base = replace(base, profile=scale_profile(base.profile, dict(step_factors)))
        out: list[float] = []
        for point in points:
            # Past the first (the current point), a candidate stops once it can no longer
            # beat the best so far (the ``keep``-th best): it scores its bound, below that,
            # so the tuner's choice is what the full replays would give.
            bars = [sorted(out)[-keep]] if len(out) >= keep else []
            bars += [floor] if floor is not None else []
            cutoff = _Cutoff(deadlines, max(bars), self._ceilings(point, kept)) if bars else None
            if cutoff is not None and cutoff.stopped:
                # Its answers' quality alone keeps it below the best: nothing to replay.
                out.append(Bound(cutoff.bound))
                continue
            setting = replace(base, control=replace(base.control, operating_point=point))
            progress = ReplayProgress(self.table, self.quality, seed=self.seed, block_causal=self.block_causal)
            res = BaseSimulator(setting, progress, self.predictors, config).run(
                self.policy, wl, slo, cutoff, calibration
            )
            if cutoff is not None and cutoff.stopped:
                out.append(Bound(cutoff.bound))
            elif warm:
                scored = res.requests.filter(pl.col("request_id").str.starts_with("window-"))
                out.append(float(good(scored).mean()))
            else:
                out.append(res.summary.goodput)
        return out

    def _ceilings(self, point: OperatingPoint, kept: Sequence[WindowArrival]) -> dict[str, float]:
        """The most goodput each scored request can make at ``point``: the quality of the
        best threshold it may step at. A pinned tier's requests step at their pin or below
        (load control only lowers a threshold), an adaptive tier's at any candidate; a
        client's floor above a pin lifts it to the lowest candidate at or above the floor
        (:func:`~dilaserve.control.thresholds.pinned_threshold`, the controller's own rule)."""
        thresholds = self.setting.control.thresholds
        memo: dict[tuple[int, float], float] = {}
        out: dict[str, float] = {}
        for i, a in enumerate(kept):
            key = (a.priority, a.min_threshold)
            if key not in memo:
                pin = point.pin(a.priority)
                top = max(thresholds) if pin is None else pinned_threshold(thresholds, pin, a.min_threshold)
                memo[key] = self.quality.ceiling(t for t in thresholds if t <= top + 1e-9)
            out[f"window-{i}"] = memo[key]
        return out


_ID, _MET, _QUALITY = (list(REQUEST_COLUMNS).index(c) for c in ("request_id", "met_slo", "quality"))


class _Cutoff:
    """A replay's give-up rule: the goodput its scored requests have already lost leaves
    it no way to reach ``best``.

    A request can make at most its ceiling (the quality of the best threshold it may step
    at), so from the start it has lost ``1 - ceiling``: a point that pins a tier low can be
    below the best on its answers' quality alone, and then is not replayed at all. A
    request recorded loses the rest of its ceiling it did not make (``met x quality``). A
    request still running past its deadline can no longer meet it: it has lost its whole
    ceiling already, and counts at once, not when it finishes, so a candidate whose queue
    holds requests past their deadlines stops sooner. The bound it stops at is exact: every
    loss it counts is one the rest of the replay cannot undo.

    Args:
    deadlines: request id -> deadline (simulated seconds) of each scored request (the
        window's, not the warm-up copy's).
    best: the best goodput a candidate replayed so far.
    ceilings: request id -> the most goodput that request can make (1 where absent).
    """

    def __init__(self, deadlines: dict[str, float], best: float, ceilings: dict[str, float] | None = None):
        self.scored = len(deadlines)
        self.limit = self.scored * (1.0 - best)
        #: the scored requests neither recorded nor counted overdue yet, and their ceilings
        self._open = {rid: (ceilings or {}).get(rid, 1.0) for rid in deadlines}
        self.lost = sum(1.0 - c for c in self._open.values())
        self.stopped = self.lost > self.limit + 1e-9
        self._due = sorted((d, rid) for rid, d in deadlines.items())
        self._next = 0  # the first of ``_due`` not yet past

    @property
    def bound(self) -> float:
        """The most goodput the replay could still have made (below the best)."""
        return 1.0 - self.lost / self.scored

    def __call__(self, row: tuple, now: float) -> bool:
        ceiling = self._open.pop(row[_ID], None)
        if ceiling is not None:
            self.lost += ceiling - float(row[_MET]) * (row[_QUALITY] or 0.0)
        # Past its deadline and still open: a miss whatever comes next.
        due = self._due
        while self._next < len(due) and due[self._next][0] < now:
            ceiling = self._open.pop(due[self._next][1], None)
            if ceiling is not None:
                self.lost += ceiling
            self._next += 1
        self.stopped = self.lost > self.limit + 1e-9
        return self.stopped


def serving_replay(
    setting: ClusterSetting,
    table,
    quality,
    predictors: Predictors,
    tuner,
    policy: SchedulerPolicy,
) -> WindowReplay:
    """The replay a server's tuner runs: its own cluster, profile and control settings
    (``setting``), the step law and quality table its artifacts recorded, its predictors."""
    progress = ReplayProgress(table, quality, block_causal=setting.block_causal)
    return WindowReplay(setting, progress, predictors, SimConfig(tuner=tuner), policy)
