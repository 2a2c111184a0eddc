"""What the operating-point tuner replays, as data (docs/architecture.md, "Operating points").

A replay job is a snapshot: the window's arrivals, the layouts and the points to replay,
nothing live. Its ``run`` calls the replay (a :class:`WindowEvaluator`, which the layer
above supplies) and decides from the scores alone, so a job gives the same answer in the
caller (the simulator) or in a worker process (a server: :mod:`dilaserve.schedule.control_worker`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Protocol

import numpy as np

from dilaserve.cluster.base import InstanceSpec
from dilaserve.control.operating_point import OperatingPoint
from dilaserve.control.predictions import StepCalibration
from dilaserve.engine.state import StepKind


@dataclass(frozen=True)
class WindowArrival:
    """What the replay needs of one recent arrival: when, how large, how urgent."""

    arrival: float
    prompt_tokens: int
    output_tokens: int
    slo_s: float
    priority: int
    min_threshold: float


#: ``((tp, kind), factor)`` pairs: how many times longer than the profile says each TP
#: degree's steps of each kind take, as the live control plane has learned the machine
#: (:mod:`dilaserve.control.step_time`); empty: as profiled.
StepFactors = tuple[tuple[tuple[int, StepKind], float], ...]


class WindowEvaluator(Protocol):
    """Replays ``arrivals`` on a cluster of ``layout`` once per point; returns each point's
    goodput (share of the replayed requests on time and correct). ``sample``: the share of
    the cluster (and of the arrivals) replayed; None: the evaluator's own. ``warm``: the
    arrivals run twice and only the second copy is scored, so the cluster starts loaded.
    ``keep``: only the ``keep`` best points need their own goodput; a point that cannot
    reach the ``keep``-th best may return a bound below it (a screen's ranking).
    ``floor``: only a goodput of at least ``floor`` matters; a point that cannot reach it
    may return a bound below it (a plan's check, once the answer is no). A bound is
    returned as a :class:`Bound`. ``calibration``: the replayed control plane's step
    predictions start from this calibration (the live one's); None: from none.
    ``step_factors``: the replayed instances step, and the replayed control plane prices
    steps, this many times slower than the profile (:data:`StepFactors`); empty: as profiled."""

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
    ) -> list[float]: ...


#: The score of a candidate a screened tuning did not replay at the full sample: it never wins.
NOT_FINALIST = float("-inf")


class Bound(float):
    """A replayed score that is not the point's own goodput: its replay stopped once it could
    not reach the best (or a floor), and this is the most it could still have made. It
    compares and adds as the float it is, so every decision reads it as before; only its
    repr differs (``<=0.9792``), so a tuning's log tells a stopped candidate, which sits just
    below the best whatever it would have made, from one replayed whole."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<={float(self):.4f}"


@dataclass(frozen=True)
class PointJob:
    """Replay the window once per candidate point; the result is each candidate's goodput.

    With ``screen`` (a share of the cluster, below the one replayed) and ``finalists``,
    the job runs in two stages: every candidate past the current point (the first) on the
    small ``screen`` slice, then the current point and the ``finalists`` best of the others
    on the full sample. The decision rests on the second stage alone, where every finalist
    replays the same sample the current point does; the others score
    :data:`NOT_FINALIST`. A screen costs a fraction of a full replay per candidate, so many
    candidates (a tiered tuning's) cost little more than a few (docs/architecture.md,
    "Operating points")."""

    arrivals: tuple[WindowArrival, ...]
    layout: tuple[InstanceSpec, ...]
    candidates: tuple[OperatingPoint, ...]
    #: share of the cluster replayed; None: the evaluator's own
    sample: float | None = None
    #: share of the cluster the first stage replays; None: one stage
    screen: float | None = None
    #: candidates past the current point that go on to the second stage
    finalists: int = 0
    #: the arrivals run twice and only the second copy is scored (a short forecast's cluster
    #: starts with the queue the rate builds, :class:`WindowEvaluator`)
    warm: bool = False
    #: the live step-prediction calibration the replays start from (None: none)
    calibration: StepCalibration | None = None
    #: how much slower than profiled the live machine steps (empty: as profiled)
    step_factors: StepFactors = ()

    def run(self, evaluate: WindowEvaluator) -> list[float]:
        if self.screen is None or len(self.candidates) <= self.finalists + 1:
            return self._replay(evaluate, self.candidates, self.sample)
        # The screen ranks the others among themselves (the current point goes on anyway),
        # from the end of the list: the current point placed or admitted the other way and
        # each tier's moves, the candidates nearest it, run first, so the far ones (the
        # uniform points, likelier worse) stop early once they cannot reach the finalists.
        others = list(range(len(self.candidates) - 1, 0, -1))
        screened = evaluate(
            self.arrivals,
            self.layout,
            [self.candidates[i] for i in others],
            sample=self.screen,
            keep=self.finalists,
            warm=self.warm,
            calibration=self.calibration,
            step_factors=self.step_factors,
        )
        # Best first: a finalist replayed after a better one may stop early on the full
        # sample, and the scores go back to their candidates, so the order decides nothing.
        ranked = [i for _, i in sorted(zip(screened, others), key=lambda pair: -pair[0])]
        picks = [0, *ranked[: self.finalists]]
        second = self._replay(evaluate, [self.candidates[i] for i in picks], self.sample)
        scores = [NOT_FINALIST] * len(self.candidates)
        for i, score in zip(picks, second):
            scores[i] = score
        return scores

    def replayed_requests(self, default_sample: float) -> float:
        """About how many requests the job replays, every candidate run to its end (a
        simulated control worker's cost model); ``default_sample``: the evaluator's own share."""
        full = self.sample if self.sample is not None else default_sample
        n, copies = len(self.candidates), 2 if self.warm else 1
        if self.screen is None or n <= self.finalists + 1:
            return copies * n * full * len(self.arrivals)
        return copies * ((n - 1) * self.screen + (1 + self.finalists) * full) * len(self.arrivals)

    def _replay(self, evaluate: WindowEvaluator, points: Sequence[OperatingPoint], sample: float | None) -> list[float]:
        return evaluate(
            self.arrivals,
            self.layout,
            points,
            sample=sample,
            warm=self.warm,
            calibration=self.calibration,
            step_factors=self.step_factors,
        )


@dataclass(frozen=True)
class LayoutVerdict:
    """A plan's replay: the window's goodput now and on the plan's layout (its transition
    blended in); at the peak rate, ``(now, on the plan's layout)`` where that was replayed.
    Where a replay of the plan's layout stopped once the plan could not pay, its figure is
    the bound it stopped at (the most it could have made), not its own goodput."""

    before: float
    after: float
    pays: bool
    held: bool
    peak: tuple[float, float] | None = None


@dataclass(frozen=True)
class LayoutJob:
    """Whether moving the cluster from ``current`` to ``target`` pays on the window
    (:meth:`~dilaserve.schedule.tuner.OperatingPointTuner.layout_pays` says how).

    ``sample`` < 1 replays a slice of the nodes under the same share of the arrivals
    (:func:`plan_slice`): the same nodes of both layouts under the same arrivals, so the
    two replays differ only where the plan does, at a fraction of a whole-cluster replay.
    ``min_arrivals``: the slice grows until it replays at least this many arrivals."""

    arrivals: tuple[WindowArrival, ...]
    current: tuple[InstanceSpec, ...]
    target: tuple[InstanceSpec, ...]
    point: OperatingPoint
    transition_share: float
    min_gain: float
    warm: bool
    peak_rate: float | None = None
    sample: float = 1.0
    min_arrivals: int = 0
    #: the live step-prediction calibration the replays start from (None: none)
    calibration: StepCalibration | None = None
    #: how much slower than profiled the live machine steps (empty: as profiled)
    step_factors: StepFactors = ()

    def replayed_requests(self, default_sample: float) -> float:
        """About how many requests the job replays, at most: both layouts, the transition and
        the peak rate's pair, each twice when warm (a simulated control worker's cost model)."""
        replays = 2 + (self.transition_share > 0) + 2 * (self.peak_rate is not None)
        return replays * (2 if self.warm else 1) * self.sample * len(self.arrivals)

    def run(self, evaluate: WindowEvaluator) -> LayoutVerdict:
        point, warm = self.point, self.warm
        evaluate = partial(evaluate, calibration=self.calibration, step_factors=self.step_factors)
        arrivals, current, target, share = plan_slice(
            self.arrivals, self.current, self.target, self.sample, self.min_arrivals
        )
        # Each replay past the first may stop once the plan can no longer pay (a goodput is at
        # most 1, so the target's floor assumes the transition replays perfectly): it then
        # scores a bound below its floor, and the verdict is the one the full replays give.
        (before,) = evaluate(arrivals, current, [point], sample=1.0, warm=warm)
        need = before + self.min_gain
        share_during = min(max(self.transition_share, 0.0), 1.0)
        floor = (need - share_during) / (1 - share_during) if share_during < 1 else None
        (after,) = evaluate(arrivals, target, [point], sample=1.0, warm=warm, floor=floor)
        kept_ids = {s.instance_id for s in target}
        kept = [s for s in current if s.instance_id in kept_ids]
        if share_during > 0:
            if floor is not None and after < floor - 1e-9:
                during = 1.0  # the plan cannot pay whatever the transition replays
            elif kept:
                floor = (need - (1 - share_during) * after) / share_during
                (during,) = evaluate(arrivals, kept, [point], sample=1.0, warm=warm, floor=floor)
            else:
                during = 0.0
            after = share_during * during + (1 - share_during) * after
        pays = after >= need
        if not (pays and self.peak_rate):
            return LayoutVerdict(before, after, pays, True)
        peak = at_rate(arrivals, self.peak_rate * share)
        if peak is None:
            return LayoutVerdict(before, after, pays, True)
        (peak_before,) = evaluate(peak, current, [point], sample=1.0, warm=warm)
        floor = peak_before - self.min_gain
        (peak_after,) = evaluate(peak, target, [point], sample=1.0, warm=warm, floor=floor)
        held = peak_after >= floor
        return LayoutVerdict(before, after, pays and held, held, (peak_before, peak_after))


def plan_slice(
    arrivals: Sequence[WindowArrival],
    current: Sequence[InstanceSpec],
    target: Sequence[InstanceSpec],
    share: float,
    min_arrivals: int = 0,
) -> tuple[list[WindowArrival], list[InstanceSpec], list[InstanceSpec], float]:
    """About ``share`` of the nodes, the same in both layouts, with the arrivals sampled by
    the share of the GPUs they hold; returns ``(arrivals, current, target, the share)``.

    The nodes are grouped by what the plan does to them (the TP degrees a node runs now and
    after) and each group keeps ``share`` of its nodes (at least one), spread over it: a
    plan that rebuilds one node of four is judged on that node and one node it keeps, not
    on a slice that may miss the change. Both layouts run on the same nodes under the same
    arrivals, so sampling noise falls on both alike. The slice grows until it replays
    ``min_arrivals`` arrivals (all of them, and the whole cluster, where the window is that
    thin). The sample comes from the window alone: the same plan on the same window
    replays the same slice."""
    if share >= 1:
        return list(arrivals), list(current), list(target), 1.0
    if arrivals:
        share = min(1.0, max(share, min_arrivals / len(arrivals)))
    nodes = sorted({s.node for s in (*current, *target)})
    gpus = {n: max(_node_gpus(current, n), _node_gpus(target, n)) for n in nodes}
    groups: dict[tuple, list[int]] = {}
    for n in nodes:
        groups.setdefault((_node_kind(current, n), _node_kind(target, n)), []).append(n)
    keep: set[int] = set()
    for members in groups.values():
        k = max(1, math.ceil(len(members) * share - 1e-9))
        picks = {int(round(i)) for i in np.linspace(0, len(members) - 1, k)}
        keep.update(members[i] for i in picks)
    total = sum(gpus.values())
    part = sum(gpus[n] for n in keep) / total if total else 1.0
    if part >= 1:
        return list(arrivals), list(current), list(target), 1.0
    seed = (len(arrivals), int(arrivals[-1].arrival * 1000) if arrivals else 0)
    draws = np.random.default_rng(seed).random(len(arrivals)).tolist()
    sampled = [a for a, u in zip(arrivals, draws) if u < part]
    return (
        sampled,
        [s for s in current if s.node in keep],
        [s for s in target if s.node in keep],
        part,
    )


def _node_gpus(layout: Sequence[InstanceSpec], node: int) -> int:
    return sum(len(s.gpus) for s in layout if s.node == node)


def _node_kind(layout: Sequence[InstanceSpec], node: int) -> tuple[int, ...]:
    return tuple(sorted(s.tp for s in layout if s.node == node))


def at_rate(arrivals: Sequence[WindowArrival], rate: float) -> list[WindowArrival] | None:
    """``arrivals`` compressed in time, towards the last, to ``rate`` per second; None where
    they already come at least that fast (or span no time)."""
    if len(arrivals) < 2:
        return None
    end = arrivals[-1].arrival
    span = end - arrivals[0].arrival
    if span <= 0 or len(arrivals) / span >= rate:
        return None
    scale = len(arrivals) / span / rate
    return [replace(a, arrival=end - (end - a.arrival) * scale) for a in arrivals]


def repeat_period(arrivals: Sequence[WindowArrival]) -> float:
    """How far apart copies of ``arrivals`` (in time order) go when they repeat back to back:
    their span and one mean gap, so the rate runs on across the seam (0 for one arrival)."""
    return (arrivals[-1].arrival - arrivals[0].arrival) * len(arrivals) / max(len(arrivals) - 1, 1)


def rate_onset(
    times: Sequence[float], start: float, end: float, min_share: float = 0.2, min_count: int = 10
) -> tuple[float, float]:
    """``(onset, rate)``: the most likely change point of ``times`` (ascending, within
    ``[start, end]``) and the arrival rate since it. The onset splits the arrivals into an
    earlier and a later constant rate with the highest Poisson likelihood, the later
    segment holding at least ``min_share`` of the arrivals and ``min_count`` of them (a
    few close arrivals at the end are no new rate). Where no split has a faster later
    rate: ``(start, the mean rate over [start, end])``."""
    n = len(times)
    mean = n / (end - start) if end > start else 0.0
    if n < 2 or end <= start:
        return start, mean
    t = np.asarray(times, dtype=float)
    k = np.arange(1, n)  # arrivals before the split at times[k]
    ok = (n - k >= max(min_share * n, min_count)) & (t[1:] > start) & (t[1:] < end)
    if not ok.any():
        return start, mean
    k, split = k[ok], t[1:][ok]
    before, after = k / (split - start), (n - k) / (end - split)
    # The log-likelihood of two rates, up to terms every split shares.
    fit = k * np.log(before) + (n - k) * np.log(after)
    best = int(np.argmax(np.where(after > before, fit, -np.inf)))
    return (float(split[best]), float(after[best])) if after[best] > before[best] else (start, mean)
