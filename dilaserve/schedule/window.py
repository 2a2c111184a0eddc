"""What the operating-point tuner replays, as data (docs/architecture.md, "Operating points").

A replay job is a snapshot: the window's arrivals, the layouts and the points to replay,
nothing live. Its ``run`` calls the replay (a :class:`WindowEvaluator`, which the layer
above supplies) and decides from the scores alone, so a job gives the same answer in the
caller (the simulator) or in a worker process (a server: :mod:`dilaserve.schedule.control_worker`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from dilaserve.cluster.base import InstanceSpec
from dilaserve.control.operating_point import OperatingPoint


@dataclass(frozen=True)
class WindowArrival:
    """What the replay needs of one recent arrival: when, how large, how urgent."""

    arrival: float
    prompt_tokens: int
    output_tokens: int
    slo_s: float
    priority: int
    min_threshold: float


class WindowEvaluator(Protocol):
    """Replays ``arrivals`` on a cluster of ``layout`` once per point; returns each point's
    goodput (share of the replayed requests on time and correct). ``sample``: the share of
    the cluster (and of the arrivals) replayed; None: the evaluator's own. ``warm``: the
    arrivals run twice and only the second copy is scored, so the cluster starts loaded."""

    def __call__(
        self,
        arrivals: Sequence[WindowArrival],
        layout: Sequence[InstanceSpec],
        points: Sequence[OperatingPoint],
        sample: float | None = None,
        warm: bool = False,
    ) -> list[float]: ...


@dataclass(frozen=True)
class PointJob:
    """Replay the window once per candidate point; the result is each candidate's goodput."""

    arrivals: tuple[WindowArrival, ...]
    layout: tuple[InstanceSpec, ...]
    candidates: tuple[OperatingPoint, ...]
    #: share of the cluster replayed; None: the evaluator's own
    sample: float | None = None

    def run(self, evaluate: WindowEvaluator) -> list[float]:
        if self.sample is None:
            return evaluate(self.arrivals, self.layout, self.candidates)
        return evaluate(self.arrivals, self.layout, self.candidates, sample=self.sample)


@dataclass(frozen=True)
class LayoutVerdict:
    """A plan's replay: the window's goodput now and on the plan's layout (its transition
    blended in); at the peak rate, ``(now, on the plan's layout)`` where that was replayed."""

    before: float
    after: float
    pays: bool
    held: bool
    peak: tuple[float, float] | None = None


@dataclass(frozen=True)
class LayoutJob:
    """Whether moving the cluster from ``current`` to ``target`` pays on the window
    (:meth:`~dilaserve.schedule.tuner.OperatingPointTuner.layout_pays` says how)."""

    arrivals: tuple[WindowArrival, ...]
    current: tuple[InstanceSpec, ...]
    target: tuple[InstanceSpec, ...]
    point: OperatingPoint
    transition_share: float
    min_gain: float
    warm: bool
    peak_rate: float | None = None

    def run(self, evaluate: WindowEvaluator) -> LayoutVerdict:
        arrivals, point, warm = self.arrivals, self.point, self.warm
        (before,) = evaluate(arrivals, self.current, [point], sample=1.0, warm=warm)
        (after,) = evaluate(arrivals, self.target, [point], sample=1.0, warm=warm)
        share = min(max(self.transition_share, 0.0), 1.0)
        kept_ids = {s.instance_id for s in self.target}
        kept = [s for s in self.current if s.instance_id in kept_ids]
        if share > 0:
            (during,) = evaluate(arrivals, kept, [point], sample=1.0, warm=warm) if kept else (0.0,)
            after = share * during + (1 - share) * after
        pays = after >= before + self.min_gain
        if not (pays and self.peak_rate):
            return LayoutVerdict(before, after, pays, True)
        peak = at_rate(arrivals, self.peak_rate)
        if peak is None:
            return LayoutVerdict(before, after, pays, True)
        (peak_before,) = evaluate(peak, self.current, [point], sample=1.0, warm=warm)
        (peak_after,) = evaluate(peak, self.target, [point], sample=1.0, warm=warm)
        held = peak_after >= peak_before - self.min_gain
        return LayoutVerdict(before, after, pays and held, held, (peak_before, peak_after))


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
