"""Step-time calibration: the control plane learns how fast the machine really steps
(docs/architecture.md, "Step-time calibration").

The latency profile is measured once, on an idle machine. On a loaded, shared or slower
machine every step takes longer than it says, and admission, thresholds and the price of
capacity, all priced on the profile, promise what the instances cannot keep. This is not
the predictor's calibration (:class:`~dilaserve.control.predictions.PredictionCache`
corrects how many *steps* a request takes); it corrects how long each step takes.

:class:`StepTimeCalibration` keeps, per instance and step kind, the median of the last
steps' measured over profiled time (the median: one step stalled by a garbage collection
or a page fault must not move it), and per TP degree the median over its instances. The
median is weighted by each step's profiled seconds: a step also pays a fixed cost the
profile's curves hardly see (the call to the instance, waking a process on a busy
machine), which makes the ratio of a one-request step of a few milliseconds several times
that of a full batch; it is the full batches whose time a queue waits for, and after a
quiet spell of small steps the first few of them must outweigh it. The server takes a
higher weighted quantile than the median (:attr:`StepTimeConfig.quantile`), or the mean
(:attr:`StepTimeConfig.estimator`): on a busy machine the ratio is bimodal, and a queue
waits for the *mean* step, the slow mode in proportion to its share. When
a degree's factor moves by more than ``tolerance`` from the one in force, the control
plane's own copy of the profile is rescaled; the simulated instances' profile (the truth
in a simulation) is never touched.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from dilaserve.engine.state import StepKind
from dilaserve.profile.types import LatencyProfile, StepCurve

KINDS = (StepKind.RECOMPUTE, StepKind.CACHE)
#: How an instance's window of measured over profiled step times becomes its estimate.
ESTIMATORS = ("quantile", "mean")


@dataclass(frozen=True)
class StepTimeConfig:
    """Attributes:
    window: steps per instance and kind the median runs over.
    min_steps: an instance's steps of a kind before its estimate counts.
    tolerance: the profile is rescaled once a degree's factor moves by more than this
        share from the one in force (noise within it changes nothing).
    bounds: the factor stays within these (a wrong clock must not make a degree free or
        unusable). The upper end is far above 8: the embedded model's full batches took
        30 to 50 times the profile's time on a 2-core machine with a busy loop per core
        beside the server (``bench burst --hog``), and a factor held at 8 there promised
        steps four times shorter than they were. Under a burst there, with the server's
        own front end busy too, a batch of four took 140 to 300 times the profile, and a
        factor held at 100 promised half its time.
    quantile: the weighted quantile of an instance's window its estimate is taken at (0.5:
        the weighted median). On a busy machine the ratio is bimodal, not noisy: with a
        busy loop per core the embedded model's one-request steps took either 2 or 60 to
        250 times the profile, depending on whether the instance's process got a core, and
        the median of a quiet spell (13x) promised a burst steps four to eight times
        shorter than its full batches took. A higher quantile prices the slow mode, which
        is what a queue waits for. A simulation that steps at the profile measures a ratio
        of exactly 1, whatever the quantile.
    estimator: ``"quantile"`` (the weighted ``quantile`` above) or ``"mean"``: the measured
        seconds of the window's steps over their profiled seconds, each step's ratio first
        clipped at the window's weighted ``clip_quantile`` (a winsorised mean). A queue
        waits for the mean step: where one step in four waits for a core at 75x and the
        others run at 2x, the median says 2x, a high quantile 75x, and the queue sees
        about 20x. Clipped, a stall in fewer than a tenth of the window's profiled seconds
        moves it no further than the slowest of the other steps.
    clip_quantile: where the mean clips each step's ratio (the weighted quantile of the
        window).
    hold_s: a degree's factor is the highest estimate of the last this many seconds: it
        rises at once and comes down only once the machine has been faster for that long
        (0: the latest estimate). A spell of light traffic measures a loaded machine as it
        is *between* bursts: a process that sleeps between single-request steps wakes ahead
        of the busy ones and runs them at 2x the profile, while under a burst it gets its
        fair share of a core and runs at 50 to 200x. In ``bench burst --hog`` the last
        quiet steps took the factor from 53x to 14x in the five seconds before the burst
        (it had been 75x earlier in the spell), and the burst's steps averaged 99x.
        Inert where the ratio does not move.
    """

    window: int = 32
    min_steps: int = 8
    tolerance: float = 0.05
    bounds: tuple[float, float] = (0.5, 1000.0)
    quantile: float = 0.5
    estimator: str = "quantile"
    clip_quantile: float = 0.9
    hold_s: float = 0.0

    def __post_init__(self) -> None:
        if self.window < 1 or not 1 <= self.min_steps <= self.window:
            raise ValueError(
                f"StepTimeConfig window={self.window} and min_steps={self.min_steps}: need "
                "1 <= min_steps <= window (e.g. 32 and 8)"
            )
        lo, hi = self.bounds
        if self.tolerance < 0 or not 0 < lo <= 1 <= hi:
            raise ValueError(
                f"StepTimeConfig tolerance={self.tolerance} must be >= 0 and bounds={self.bounds} must hold 1 "
                "with a positive lower end (e.g. (0.5, 1000.0))"
            )
        if self.estimator not in ESTIMATORS:
            raise ValueError(
                f"StepTimeConfig estimator={self.estimator!r} is not one of {ESTIMATORS}: 'quantile' prices "
                "steps at a weighted quantile of their measured time, 'mean' at their clipped mean"
            )
        if self.hold_s < 0:
            raise ValueError(f"StepTimeConfig hold_s={self.hold_s} must be >= 0 seconds (0: no hold; e.g. 60)")
        if not 0 < self.clip_quantile <= 1:
            raise ValueError(
                f"StepTimeConfig clip_quantile={self.clip_quantile} must lie in (0, 1] (e.g. 0.9; 1 clips nothing)"
            )
        if not 0 < self.quantile < 1:
            raise ValueError(
                f"StepTimeConfig quantile={self.quantile} must lie in (0, 1): 0.5 is the weighted median, "
                "0.9 prices the slowest tenth of the steps' time"
            )


def weighted_median(pairs) -> float:
    """The median of ``(value, weight)`` pairs by weight: midway between the smallest value
    with at least half the total weight at or below it and the largest with at least half
    at or above it (with equal weights, the usual median)."""
    return weighted_quantile(pairs, 0.5)


def weighted_quantile(pairs, q: float) -> float:
    """The ``q`` quantile of ``(value, weight)`` pairs by weight: midway between the
    smallest value with at least ``q`` of the total weight at or below it and the largest
    with at least ``1 - q`` at or above it (at 0.5, :func:`weighted_median`)."""
    values, weights = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    total = w.sum()
    lo = v[min(np.searchsorted(np.cumsum(w), q * total), len(v) - 1)]
    hi = v[::-1][min(np.searchsorted(np.cumsum(w[::-1]), (1.0 - q) * total), len(v) - 1)]
    return float(0.5 * (lo + hi))


def clipped_mean_log(pairs, clip_quantile: float) -> float:
    """The log of the weighted mean ratio of ``(log ratio, weight)`` pairs, each ratio
    clipped at the pairs' weighted ``clip_quantile`` first: the measured over the profiled
    seconds of a window of steps, where one stall cannot move it past the other steps."""
    logs, weights = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    top = weighted_quantile(pairs, clip_quantile) if clip_quantile < 1 else float(logs.max())
    ratios = np.exp(np.minimum(logs, top))
    return float(np.log(np.dot(ratios, weights) / weights.sum()))


def scale_profile(profile: LatencyProfile, factors: dict[tuple[int, StepKind], float]) -> LatencyProfile:
    """``profile`` with each ``(tp, kind)`` curve's latencies times its factor (1 where
    none is given); a degree without a cache curve keeps falling back to its recompute one."""

    def scaled(curves: dict[int, StepCurve], kind: StepKind) -> dict[int, StepCurve]:
        out = {}
        for tp, c in curves.items():
            f = factors.get((tp, kind), 1.0)
            out[tp] = c if f == 1.0 else StepCurve(c.tokens, tuple(v * f for v in c.latency_s))
        return out

    return LatencyProfile(
        profile.name,
        scaled(profile.recompute, StepKind.RECOMPUTE),
        scaled(profile.cache, StepKind.CACHE),
        dict(profile.meta),
    )


class StepTimeCalibration:
    """Args:
    profile: the control plane's own profile: rescaled in place as the machine is learned
        (its measured curves are kept as the base the factors apply to).
    config: window, warm-up, tolerance and bounds.
    """

    def __init__(self, profile: LatencyProfile, config: StepTimeConfig = StepTimeConfig()):
        self.profile = profile
        self.config = config
        self.base = scale_profile(profile, {})
        #: (instance, kind) -> (log of measured over profiled time, profiled seconds) of
        #: the last ``window`` steps
        self._ratios: dict[tuple[str, StepKind], deque[tuple[float, float]]] = {}
        #: (instance, kind) -> the profiled seconds in its window, kept as steps come and go
        #: (summing the window on every step was the step loop's hot path)
        self._weight: dict[tuple[str, StepKind], float] = {}
        #: (instance, kind) -> the estimate of its window, until a step changes the window
        #: (a refit after one instance's step asks every instance of its degree again)
        self._estimates: dict[tuple[str, StepKind], float] = {}
        self._tp_of: dict[str, int] = {}
        #: steps seen per instance: the factors are refitted every ``min_steps`` of them,
        #: and sooner when the steps since the last refit carry a quarter of the profiled
        #: seconds in the instance's window (:meth:`_due`)
        self._seen: dict[str, int] = {}
        #: instance -> profiled seconds of its steps since the last refit
        self._fresh: dict[str, float] = {}
        #: (tp, kind) -> the factor the profile is scaled by now
        self.factors: dict[tuple[int, StepKind], float] = {}
        #: (tp, kind) -> ``(time, estimate)`` of the refits of the last ``hold_s`` seconds
        self._held: dict[tuple[int, StepKind], deque[tuple[float, float]]] = {}
        #: instance -> (seconds its last measured step took, the profile's seconds for
        #: it): the step-time cap reads it (a batch whose step already took too long is not
        #: grown, and one grows by at most a step's worth at a time, learned factor or not)
        self.last_step: dict[str, tuple[float, float]] = {}

    def expected(self, tp: int, recompute_tokens: float, cache_tokens: float) -> tuple[float, float]:
        """The measured profile's seconds for a step's recompute and cache passes."""
        rec = self.base.latency(tp, recompute_tokens, StepKind.RECOMPUTE) if recompute_tokens else 0.0
        cac = self.base.latency(tp, cache_tokens, StepKind.CACHE) if cache_tokens else 0.0
        return rec, cac

    def observe(
        self, instance_id: str, tp: int, expected: tuple[float, float], measured_s: float, now: float = 0.0
    ) -> bool:
        """Learn from one step: ``expected`` (recompute, cache seconds the measured profile
        gives it) against ``measured_s``, finished at ``now`` (seconds, for ``hold_s``). A
        mixed step's ratio counts for both its kinds. Returns True when the profile was
        rescaled."""
        total = sum(expected)
        if total <= 0 or not measured_s > 0 or not math.isfinite(measured_s):
            return False
        ratio = math.log(measured_s / total)
        self._tp_of[instance_id] = tp
        self.last_step[instance_id] = (measured_s, total)
        for kind, part in zip(KINDS, expected):
            if part > 0:
                key = (instance_id, kind)
                window = self._ratios.get(key)
                if window is None:
                    window = self._ratios[key] = deque(maxlen=self.config.window)
                    self._weight[key] = 0.0
                if len(window) == window.maxlen:
                    self._weight[key] -= window[0][1]
                window.append((ratio, part))
                self._weight[key] += part
                self._estimates.pop(key, None)
        self._seen[instance_id] = self._seen.get(instance_id, 0) + 1
        self._fresh[instance_id] = self._fresh.get(instance_id, 0.0) + total
        return self._due(instance_id) and self._refit(tp, now)

    def _due(self, instance_id: str) -> bool:
        """Whether to refit after this step: every ``min_steps`` steps, or as soon as the
        steps since the last refit carry a quarter of the window's profiled seconds. After
        a quiet spell of one-request steps, the first full batches of a burst take seconds
        each on a loaded machine: waiting for eight of them would let admission promise on
        the old factor through the whole burst."""
        seen, fresh = self._seen[instance_id], self._fresh[instance_id]
        if seen % self.config.min_steps:
            weight = max((self._weight.get((instance_id, k), 0.0) for k in KINDS), default=0.0)
            if seen < self.config.min_steps or fresh < 0.25 * weight:
                return False
        self._fresh[instance_id] = 0.0
        return True

    def forget(self, instance_id: str) -> None:
        """An instance is gone: its steps no longer speak for its degree."""
        self._tp_of.pop(instance_id, None)
        self.last_step.pop(instance_id, None)
        self._seen.pop(instance_id, None)
        self._fresh.pop(instance_id, None)
        for kind in KINDS:
            self._ratios.pop((instance_id, kind), None)
            self._weight.pop((instance_id, kind), None)
            self._estimates.pop((instance_id, kind), None)

    def factor(self, tp: int, kind: StepKind) -> float:
        """Measured over profiled step time on TP-``tp`` for ``kind`` (1.0 until learned)."""
        return self.factors.get((tp, kind), 1.0)

    def _estimate(self, tp: int, kind: StepKind) -> float | None:
        cfg = self.config
        per_instance = [
            self._window_estimate(key, w)
            for key, w in self._ratios.items()
            if key[1] == kind and self._tp_of.get(key[0]) == tp and len(w) >= cfg.min_steps
        ]
        if not per_instance:
            return None
        lo, hi = cfg.bounds
        return min(max(math.exp(float(np.median(per_instance))), lo), hi)

    def _window_estimate(self, key: tuple[str, StepKind], window: deque[tuple[float, float]]) -> float:
        q = self._estimates.get(key)
        if q is None:
            cfg = self.config
            q = (
                clipped_mean_log(window, cfg.clip_quantile)
                if cfg.estimator == "mean"
                else weighted_quantile(window, cfg.quantile)
            )
            self._estimates[key] = q
        return q

    def _refit(self, tp: int, now: float) -> bool:
        changed = False
        for kind in KINDS:
            new = self._estimate(tp, kind)
            if new is None:
                continue
            new = self._hold((tp, kind), new, now)
            old = self.factor(tp, kind)
            if abs(new / old - 1.0) > self.config.tolerance:
                self.factors[(tp, kind)] = new
                changed = True
        if changed:
            fresh = scale_profile(self.base, self.factors)
            self.profile.recompute, self.profile.cache = fresh.recompute, fresh.cache
        return changed

    def _hold(self, key: tuple[int, StepKind], estimate: float, now: float) -> float:
        """The highest of ``estimate`` and the estimates of the last ``hold_s`` seconds."""
        if self.config.hold_s <= 0:
            return estimate
        held = self._held.setdefault(key, deque())
        while held and held[0][0] < now - self.config.hold_s:
            held.popleft()
        held.append((now, estimate))
        return max(e for _, e in held)
