"""The operating-point tuner: model-predictive control over static and adaptive points.

Every ``interval_s`` the tuner replays the arrivals of the last ``window_s`` through the
simulator, which runs this same control plane, once per candidate operating point: every
tier pinned to each threshold the quality budget allows, and the adaptive walk (with
tiers, each tier's alternatives with the others held). New arrivals then run at the point
that made the most goodput on the replay; the current point is kept unless another beats
it by ``min_gain``. With tiers the candidates are several times one tier's, and a tuning
may first screen them all on a small slice and replay only the current point and the best
few on the full sample (``TunerConfig.screen``, off by default). A reconfiguration plan is replayed the
same way (the window at the current point, on the current layout and on the plan's) and
applied only where it gains. The candidates include every static point the budget allows,
so over a stationary stretch the cluster runs at the best static point in hindsight of the
last window, and where the load or the tier mix moves it follows (docs/architecture.md,
"Operating points"). A point and a layout were chosen on their window's load: when the
arrivals of the last seconds rise well past it, the tuner does not wait for the next
interval but tunes at once on a forecast that the new rate holds.

The replay itself is a :class:`WindowEvaluator` that the layer above supplies (the
simulator, or the server from its artifacts): the control plane never imports the
simulator. The tuner hands its replays to a
:class:`~dilaserve.schedule.control_worker.ControlWorker` as snapshots
(:mod:`dilaserve.schedule.window`): at once in the simulator, in a process beside the
step loop in a server, where a result is adopted between steps once it comes back.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from dilaserve.cluster.base import InstanceSpec
from dilaserve.control.operating_point import OperatingPoint
from dilaserve.control.predictions import StepCalibration
from dilaserve.control.request import TrackedRequest
from dilaserve.engine.state import StepKind
from dilaserve.schedule.control_worker import ControlWorker, InlineWorker, candidates_within
from dilaserve.schedule.window import (
    Bound,
    LayoutJob,
    LayoutVerdict,
    PointJob,
    StepFactors,
    WindowArrival,
    WindowEvaluator,
    at_rate,
    rate_onset,
    repeat_period,
)

__all__ = ["OperatingPointTuner", "TunerConfig", "TuningRecord", "WindowArrival", "WindowEvaluator"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TuningRecord:
    """One tuning the tuner adopted, as plain data (a simulated run reports these).

    ``replayed`` holds each candidate's replayed goodput, in the order the tuner weighed
    them: the first is the point the tuning started from (the running point, admitted
    again after a rise), which always replays whole, as does the chosen point; ``stopped``
    names the candidates whose figure is the bound their replay stopped at
    (:class:`~dilaserve.schedule.window.Bound`), not their own goodput."""

    time: float
    point: str
    rose: bool
    replayed: dict[str, float]
    stopped: tuple[str, ...] = ()

    @property
    def start(self) -> str:
        """The point the tuning started from (kept unless another beat it by ``min_gain``)."""
        return next(iter(self.replayed))


@dataclass(frozen=True)
class TunerConfig:
    """How often and on what the operating-point tuner replays.

    Attributes:
        interval_s: seconds between two tunings (of event time).
        window_s: the arrivals of the last this many seconds are replayed.
        sample: the share of the window's arrivals replayed, and of the instances (or,
            with ``compress``, of its span): a quarter of the traffic on a quarter of the
            cluster, or at the window's rate on the whole of it, keeps each instance's load
            and costs about a quarter of a full replay. A plan's check replays this share of the
            nodes (at least one of each kind the plan treats alike).
        min_gain: switch only to a point whose replayed goodput beats the current point's
            by at least this much (a share of requests): noise must not flap the point.
        min_arrivals: tune only once the window holds this many (sampled) arrivals.
        warm_plans: a plan's layouts are replayed warm (the window twice, the second
            scored): from an empty cluster a layout short of throughput never builds the
            queue it would live with, and replays better than it runs.
        rise_window_s: on every arrival the arrivals of the last this many seconds are
            counted against the rate of the window the point was chosen on; where they
            rise past it (``rise_sigmas``) the tuner tunes at once, on those seconds
            repeated over a window (the forecast that the new rate holds), with admission
            on and no point that takes every arrival until a whole window has passed.
        rise_sigmas: the rise that trips it, in standard deviations of the Poisson count
            the chosen window's rate predicts for ``rise_window_s``.
        rise_resets_window: a rise starts the tuner's window where its rise window begins:
            the seconds before it hold the rate the load rose from. A tuning at the next
            interval that replays them too chooses on an average of the old and the new
            rate, and sets that average as the rate later rises are compared with, so the
            steady new rate can trip a rise again at once. On the single-SLO trace with 40-s
            phases at 1.0x it did: the interval after the step to the peak chose 0.9, the rise
            it then tripped chose 0.7 for the rest of the peak, and the peak's goodput was
            91.7% against 92.0% with the window reset (one run each). The forecast is the
            same either way. False (the default): on the quick tiered runs the shorter window
            after a rise cost 0.15 to 0.5 points (docs/architecture.md, "Capacity at an SLO"),
            so the window keeps its whole span (``rise_onset`` still moves it).
        rise_onset: a rise's forecast runs at the rate since the rise began, not the rise
            window's: the window still holds the seconds before it, so a step in the rate
            was forecast at part of its height and tripped the rise again every second
            until the window held the new rate alone (on the quick tiered trace, five
            tunings in four seconds). The onset is the split of the rise window's arrivals
            that best fits two rates (:func:`~dilaserve.schedule.window.rate_onset`); the
            window's arrivals are compressed in time to the later rate, and the tuner's
            window then starts at the onset: a tuning at the next interval replays (and
            compares later rises with) the new rate alone, not its average with the
            seconds before it. False (the default): the rise window's rate.
        rise_forecast_from_window: a rise's forecast replays the window's own arrivals (up
            to a window of distinct requests) compressed in time to the rise's rate, not the
            rise window's few seconds repeated. Five seconds at the top of a ramp hold a
            few hundred requests; repeated over a window, their lengths weigh six times
            over. At the one-SLO knee (1.2x, 40-s phases) the repeated forecast ranked 0.7
            above 0.8 by 0.6 to 2.1 points at the ramp's last rise, on any sample and warm
            or cold, where over the peak 0.8 wins by a point (docs/architecture.md,
            "Capacity at an SLO"). Pooled over three seeds this made 88.86% in the peak
            against 88.57%. False (the default): the recorded runs were made without it.
        max_backoff: after a tuning that kept the point, the next comes twice as late, up
            to this many ``interval_s``; a switch or a rise brings it back to ``interval_s``.
            Over a stationary stretch the replays then cost a fraction of what tuning
            every interval does, and a rise of the load still trips a tuning at once.
            1: every ``interval_s``.
        screen: a tuning whose window holds more than one priority tier (its candidates
            are several times one tier's) first replays every candidate on this share of
            the cluster (and of the arrivals), then the current point and the
            ``finalists`` best on ``sample``, and decides on that second replay alone.
            None (the default, or not below ``sample``): every candidate on ``sample``. A
            window of one tier is screened only with ``screen_one_tier``. At 0.125 it cut a
            tuned tiered run's CPU by a third at about the same goodput on the recorded
            traces, but at a lighter load its noise cost 1.5 points (quick tiers at 0.6 of
            the peak: 88.3% goodput against 89.8%), and the tiered rate held at 90% goodput
            fell from 61.6 to 49.7 requests per second (docs/architecture.md, "Operating
            points"): off until a screen pays there too.
        finalists: how many candidates past the current point a screen passes on.
        screen_one_tier: a window of one tier is screened too. Its candidates are few, so a
            screen saves little there; what it buys is a decision on more evidence, with the
            screen at the share the candidates would replay on and a larger ``sample`` for
            the current point and the finalists. Near saturation a quarter of the instances
            queues where the cluster does not, and favours the faster point: on the
            single-SLO trace with 40-s phases at 1.2034x, ``sample`` 0.5 with ``screen``
            0.25 and this made 89.24% goodput in the peak against 88.20% with the defaults
            (docs/architecture.md, "Capacity at an SLO"). False (the default): with a
            screen of 0.125, over eight quick runs with and without tiers, it moved goodput
            by -0.55 to +0.56 points and by about nothing on average, and the same settings
            cut the tiered rate held at 90% goodput from 1.17x the best static point to 0.99x.
        compress: a tuning's sample replays the whole cluster under ``sample`` of the
            window's arrivals, compressed in time by the same share (each instance carries
            the window's load, over that share of its span), rather than ``sample`` of the
            instances over the whole span. A slice of the instances pools its load over
            fewer of them: near saturation it queues where the cluster does not, and it
            ranks faster, lower-threshold points above those a replay of the whole cluster
            ranks first (docs/architecture.md, "Operating points", "The whole cluster in
            a sample"). But a window compressed to a quarter of its span starts empty for
            more of it, and 16 instances stepping small batches cost more per request: on
            the tiered max-rate search it lost 2.5 to 3.6 points of goodput at 0.6 to 0.9
            of capacity and took about twice the time. False (the default): a slice of the
            instances. A plan's check is not affected (it slices nodes,
            :func:`~dilaserve.schedule.window.plan_slice`).
        local_moves: with tiers, each tier is moved alone to adaptive and to the thresholds
            one step above and below its pin (every threshold where it is adaptive), not to
            every threshold: the uniform points still offer every jump, and a tier's best
            pin moves a step at a time between tunings. False (the default): every threshold.
        rise_forecast_s: the seconds a rise's forecast spans (the rise window's arrivals
            repeated back to back): a shorter forecast replays in less time, so where the
            replays take time (a server's worker) the rise's point comes back sooner, on a
            queue that has had less time to build; at most a window. None (the default,
            and the simulator's): a whole window. A server forecasts 15 s (``python -m
            dilaserve.serve``'s default): its replays take time, and with a simulated
            server's replay time a tiered quick run's rises came back in half the time and
            made more goodput than over a whole window (docs/architecture.md, "Control
            beside the step loop").
        warm_rises: a rise's forecast that spans less than a window is replayed warm (twice,
            the second copy scored), as a plan's layouts are: from an empty cluster a
            15-s forecast of an overload never builds the queue the rate builds over a
            minute, and it rated the adaptive walk above the lower thresholds a sustained
            peak needs (a simulated server's single-SLO run at seed 1 of the published law
            lost 2 points to it). A whole window's forecast is replayed cold, as before.
        replay_calibration: a replay's step predictions start from the live control plane's
            calibration (:class:`~dilaserve.control.predictions.StepCalibration`: the
            factor per answer length that the finished requests taught it), not from none.
            A window holds few finishes of each length class, so a replay that starts
            uncalibrated predicts with the predictor's length bias for most of its span,
            and its admission refuses and takes other requests than the live one would.
            False (the default): the recorded runs were made without it
            (docs/architecture.md, "Operating points").
        rise_point_unheld: the interval's first tuning after a rise weighs the point the
            rise chose with no ``min_gain`` in its favour, and a tuning whose window holds
            the last rise compares later rises with that rise's rate (where it is above the
            window's). A rise chooses on a forecast (a few seconds of arrivals, at a rate
            often still climbing), and the window's own arrivals are better evidence: with
            the hysteresis, a point a ramp's rise chose by a hundredth of a point over
            ``min_gain`` held through a peak that the later replays said it lost. And the
            window replays the rise's arrivals at their own rate, so its average (the low
            seconds with the new rate) is not the rate its point was weighed against; taken
            as that rate, it made the steady new rate trip a rise in the same second, which
            chose again on a forecast. False (the default): over 18 quick runs on four
            workloads it moved goodput by -0.41 to +0.78 points, +0.11 on average, within a
            run's draw (docs/architecture.md, "Capacity at an SLO"), and the recorded runs
            were made without it.
        replay_step_time: a replay steps, and its control plane prices steps, as much slower
            than the profile as the live control plane has learned the machine to be
            (:mod:`dilaserve.control.step_time`), not at the profile. A server whose steps
            take several times what an idle machine's profile says otherwise ranks its
            points on a machine several times faster than its own, where slower,
            higher-quality points keep their SLOs. True (the default): where the machine
            steps as profiled (every simulation without ``step_time_factor``) no factor is
            learned and nothing changes; False: the profile as measured.
    """

    interval_s: float = 60.0
    window_s: float = 60.0
    sample: float = 0.25
    min_gain: float = 0.005
    min_arrivals: int = 40
    warm_plans: bool = True
    rise_window_s: float = 5.0
    rise_sigmas: float = 3.0
    rise_resets_window: bool = False
    rise_onset: bool = False
    rise_forecast_from_window: bool = False
    max_backoff: float = 4.0
    screen: float | None = None
    finalists: int = 1
    screen_one_tier: bool = False
    local_moves: bool = False
    compress: bool = False
    rise_forecast_s: float | None = None
    warm_rises: bool = True
    replay_calibration: bool = False
    rise_point_unheld: bool = False
    replay_step_time: bool = True

    def __post_init__(self) -> None:
        if self.screen is not None and not (0 < self.screen <= 1 and self.finalists >= 1):
            raise ValueError(
                f"TunerConfig.screen={self.screen} must lie in (0, 1] with finalists={self.finalists} >= 1 "
                "(e.g. 0.125 and 1), or be None to replay every candidate on sample"
            )
        if self.max_backoff < 1:
            raise ValueError(
                f"TunerConfig.max_backoff={self.max_backoff} must be >= 1 (a multiple of interval_s; 1 tunes "
                "every interval)"
            )
        if self.interval_s <= 0 or self.window_s <= 0:
            raise ValueError(
                f"TunerConfig interval_s={self.interval_s} and window_s={self.window_s} must be positive seconds"
            )
        if not 0 < self.sample <= 1:
            raise ValueError(f"TunerConfig.sample={self.sample} must lie in (0, 1]: the share replayed, e.g. 0.25")
        if self.min_gain < 0:
            raise ValueError(f"TunerConfig.min_gain={self.min_gain} must be >= 0 (a share of requests, e.g. 0.005)")
        if self.rise_forecast_s is not None and not self.rise_forecast_s >= self.rise_window_s:
            raise ValueError(
                f"TunerConfig.rise_forecast_s={self.rise_forecast_s} must be at least rise_window_s="
                f"{self.rise_window_s} (e.g. 15 s), or None for a whole window"
            )
        if not 0 < self.rise_window_s <= self.window_s or self.rise_sigmas <= 0:
            raise ValueError(
                f"TunerConfig rise_window_s={self.rise_window_s} must lie in (0, window_s={self.window_s}] and "
                f"rise_sigmas={self.rise_sigmas} must be positive (e.g. 5 s and 3 standard deviations)"
            )


class OperatingPointTuner:
    """Args:
    evaluate: the replay (:class:`WindowEvaluator`).
    thresholds: the thresholds a tier may be pinned to (those the quality budget allows).
    config: interval, window, sample and hysteresis.
    placement: the scheduler's dispatch can place by slack, so the tuner also weighs the
        current point with the other placement (:attr:`OperatingPoint.fit`).
    admission: the policy has SLO-aware admission, so the tuner also weighs the current
        point with admission switched the other way (:attr:`OperatingPoint.admit`).
    worker: runs the replays (:class:`~dilaserve.schedule.control_worker.ControlWorker`);
        None: at once, in the caller.
    learned: what the live step predictions' calibration has learned, now (the
        controller's :meth:`~dilaserve.control.controller.ThresholdController.learned_calibration`);
        with ``config.replay_calibration`` every replay starts from it.
    machine: how much slower than profiled the live instances step, now (the learned
        factors per TP degree and step kind, :mod:`dilaserve.control.step_time`); with
        ``config.replay_step_time`` every replay steps and prices that much slower.
    """

    def __init__(
        self,
        evaluate: WindowEvaluator,
        thresholds: Sequence[float],
        config: TunerConfig = TunerConfig(),
        placement: bool = False,
        admission: bool = False,
        worker: ControlWorker | None = None,
        learned: Callable[[], StepCalibration | None] | None = None,
        machine: Callable[[], Mapping[tuple[int, StepKind], float]] | None = None,
    ):
        self.evaluate = evaluate
        self._learned = learned
        self._machine = machine
        #: runs the replays: at once by default (the simulator), beside the step loop in a server
        self.worker = worker or InlineWorker(evaluate)
        #: tag -> what a job in the worker was started for (adopted when its result comes back)
        self._pending: dict[int, _Pending] = {}
        self._tags = itertools.count()
        #: seconds to the next tuning: ``interval_s``, doubled after each that kept the point
        self._interval = config.interval_s
        self.thresholds = tuple(float(t) for t in thresholds)
        self.config = config
        self.placement = placement
        self.admission = admission
        self._window: deque[WindowArrival] = deque()
        self._last = None
        #: arrivals per second the current point was chosen on (None before the first tuning)
        self._tuned_rate: float | None = None
        #: no take-all candidate before this time: the window still holds the load it rose from
        self._take_all_after = float("-inf")
        #: ``(time, arrivals)`` the last tuning replayed, for a plan checked at that moment
        self._evidence: tuple[float, list[WindowArrival]] | None = None
        #: where the last rise began (``rise_onset``): the window holds no arrival before it
        self._onset = float("-inf")
        #: arrivals per second the last rise forecast
        self._rise_rate = 0.0
        #: times the tuner tuned early on a rise of the arrival rate
        self.rises: list[float] = []
        #: every tuning adopted, as plain data (:class:`TuningRecord`)
        self.records: list[TuningRecord] = []
        #: ``(time, goodput now, goodput on the plan's layout, applied)`` of every plan replayed.
        self.plan_checks: list[tuple[float, float, float, bool]] = []

    def observe(self, req: TrackedRequest, now: float) -> None:
        """Record an arrival (admitted or not: refused requests are demand too)."""
        st = req.state
        prompt = st.num_tokens - st.gen_length
        self._window.append(WindowArrival(now, prompt, st.gen_length, req.slo, req.priority, req.min_threshold))
        if self._last is None:
            self._last = now  # the first window starts with the first arrival

    def maybe_tune(self, now: float, layout: Sequence[InstanceSpec], current: OperatingPoint) -> OperatingPoint | None:
        """The point to switch to, or None to keep ``current`` (also when no tuning is due).

        A due tuning goes to the worker; its point is returned once its result is back (at
        once for an inline worker, at a later call or :meth:`collect` otherwise). A tuning
        never queues behind another: while one runs, a due tuning is skipped, and a rise of
        the arrival rate replaces a running tuning of the window (its result is dropped) but
        not one of an earlier rise, whose result is adopted first (a later rise then trips
        against the rate that one chose on)."""
        cfg = self.config
        rose = self._load_rose(now)
        if not rose and (self._last is None or now - self._last < self._interval):
            return self.collect(now, current)
        if rose and self._rise_running():
            # A tuning on a rise's forecast is out: it replays the rise, so let it come back
            # and weigh what rose since against the rate it chose on. Replacing it at every
            # arrival of a ramp would leave the cluster on the point it had until the ramp ends.
            return self.collect(now, current)
        self._last = now
        self._trim(now)
        if rose:
            arrivals, rate, onset = self._forecast(now)
            self._onset = max(self._onset, onset)  # the window starts there from now on
            self.rises.append(now)
            self._rise_rate = rate
            self._take_all_after = now + cfg.window_s
            base = current.with_admit(True)  # a take-all point's evidence is gone
        else:
            arrivals, rate, base = list(self._window), self._window_rate(now), current
            if cfg.rise_point_unheld and self.rises and self.rises[-1] >= now - cfg.window_s:
                # The window replays the last rise's arrivals at their own rate: the point
                # chosen on it was weighed against that rate, not the window's average.
                rate = max(rate, self._rise_rate)
        self._evidence = (now, arrivals)
        if rose:
            self._tuned_rate = rate  # admission is back on for this rate, tuned or not
        if len(arrivals) * cfg.sample < cfg.min_arrivals or not layout:
            return None if base == current else base
        if self.worker.busy:
            if not rose:
                return self.collect(now, current)  # never a second tuning behind the first
            self.worker.cancel()  # the running one replays a rate that is gone
            self._pending.clear()
        self._tuned_rate = rate
        scale = self.worker.scale
        priorities = {a.priority for a in arrivals}
        candidates = candidates_within(self.candidates(base, priorities, now), scale)
        sample = None if scale >= 1 else cfg.sample * scale
        warm = rose and cfg.warm_rises and self._forecast_span() < cfg.window_s
        calibration = self._calibration()
        if cfg.screen is not None and cfg.screen < cfg.sample and (len(priorities) > 1 or cfg.screen_one_tier):
            order = list(range(len(candidates)))  # a screen ranks in its own order
            job = PointJob(
                tuple(arrivals),
                tuple(layout),
                tuple(candidates),
                sample,
                cfg.screen * scale,
                cfg.finalists,
                warm,
                calibration,
                self._step_factors(),
            )
        else:
            order = self._replay_order(candidates)
            job = PointJob(
                tuple(arrivals),
                tuple(layout),
                tuple(candidates[i] for i in order),
                sample,
                warm=warm,
                calibration=calibration,
                step_factors=self._step_factors(),
            )
        tag = next(self._tags)
        self._pending[tag] = _Pending(now, candidates=candidates, base=base, rate=rate, rose=rose, order=order)
        if not self.worker.submit(tag, job):
            del self._pending[tag]  # over its CPU budget: serve on at the point there is
        tunings = len(self.records)
        adopted = self.collect(now, current)
        if len(self.records) > tunings:
            return adopted
        return None if base == current else base  # admission is back on at once after a rise

    def _calibration(self) -> StepCalibration | None:
        """The live calibration a replay starts from (None: none, as configured)."""
        if not self.config.replay_calibration or self._learned is None:
            return None
        return self._learned()

    def _step_factors(self) -> StepFactors:
        """The live machine's step-time factors a replay steps at (empty: as profiled)."""
        if not self.config.replay_step_time or self._machine is None:
            return ()
        return tuple(sorted((key, float(f)) for key, f in self._machine().items() if f != 1.0))

    def _rise_running(self) -> bool:
        """A tuning tripped by a rise is out with the worker."""
        return self.worker.busy and any(job.rose for job in self._pending.values())

    @property
    def last_rose(self) -> bool:
        """The last tuning adopted was tripped by a rise of the arrival rate."""
        return bool(self.records and self.rises and self.records[-1].time == self.rises[-1])

    @property
    def pending(self) -> bool:
        """A replay is out with the worker."""
        return bool(self._pending)

    def collect(self, now: float, current: OperatingPoint) -> OperatingPoint | None:
        """Adopt the results the worker has finished: the point a tuning chose (None to keep
        ``current``); a plan's verdict goes to the callback it was checked with. A result
        that comes back later than an interval after its window is stale and dropped."""
        chosen = None
        for tag, result in self.worker.poll():
            job = self._pending.pop(tag, None)
            if job is None:
                continue
            if now - job.now > self.config.interval_s:
                log.info("tuner at %.0fs: dropped the replay of %.0fs (stale)", now, job.now)
                continue
            if job.on_verdict is not None:
                self._adopt_verdict(job, result)
            else:
                chosen = self._adopt_point(job, result)
        if not self.worker.busy:
            self._pending.clear()  # nothing is out: what is left was cancelled
        return None if chosen is None or chosen == current else chosen

    def _replay_order(self, candidates: Sequence[OperatingPoint]) -> list[int]:
        """The order the candidates replay in: the current point first (every other is
        weighed against it, so it always replays whole), then best first by the goodput the
        last tuning replayed for each (one it did not replay ranks as the current point
        did). A candidate stops once it cannot beat the best replayed before it, so a good
        one replayed early stops the others sooner. The order decides nothing: the current
        point and the best replay whole in any order, and their scores go back to their
        candidates (ties too break as in the candidates' own order)."""
        last = self.records[-1].replayed if self.records else {}
        neutral = last.get(candidates[0].label, 0.0)
        rest = sorted(range(1, len(candidates)), key=lambda i: -last.get(candidates[i].label, neutral))
        return [0, *rest]

    def _adopt_point(self, job: _Pending, replayed: Sequence[float]) -> OperatingPoint:
        candidates, base = job.candidates, job.base
        scores = [0.0] * len(candidates)
        for k, i in enumerate(job.order):
            scores[i] = replayed[k]
        by_label = {p.label: s for p, s in zip(candidates, scores)}
        best = max(range(len(candidates)), key=lambda i: scores[i])
        cfg = self.config
        # The current point replays whole, and so does the best: the scores compared are exact.
        held = 0.0 if cfg.rise_point_unheld and self.last_rose and not job.rose else cfg.min_gain
        chosen = candidates[best] if scores[best] > scores[0] + held else base
        kept = chosen == candidates[0] and not job.rose
        self._interval = min(2 * self._interval, cfg.max_backoff * cfg.interval_s) if kept else cfg.interval_s
        self.records.append(
            TuningRecord(
                job.now,
                chosen.label,
                job.rose,
                {label: float(s) for label, s in by_label.items()},
                tuple(label for label, s in by_label.items() if isinstance(s, Bound)),
            )
        )
        log.info(
            "tuner at %.0fs%s: %s (replayed goodput, <= where a replay stopped at its bound: %s)",
            job.now,
            f" (arrivals rose to {job.rate:.1f}/s)" if job.rose else "",
            chosen.label,
            by_label,
        )
        return chosen

    def _trim(self, now: float) -> None:
        start = max(now - self.config.window_s, self._onset)
        while self._window and self._window[0].arrival < start:
            self._window.popleft()

    def _window_rate(self, now: float) -> float:
        """Arrivals per second over the window (over what has passed of it early in a run)."""
        span = min(self.config.window_s, now - self._window[0].arrival) if self._window else 0.0
        return len(self._window) / span if span > 0 else 0.0

    def _recent(self, now: float) -> list[WindowArrival]:
        start = now - self.config.rise_window_s
        out = []
        for a in reversed(self._window):
            if a.arrival < start:
                break
            out.append(a)
        return out[::-1]

    def _load_rose(self, now: float) -> bool:
        """The arrivals of the last ``rise_window_s`` exceed, by ``rise_sigmas`` Poisson
        deviations, what the rate the current point was chosen on predicts. A point
        replayed on a low phase's load says nothing about a peak's: a point that takes
        every arrival lets the whole peak into the batches, and a layout planned for the
        low phase runs the peak short of throughput, until the next interval."""
        if self._tuned_rate is None:
            return False
        cfg = self.config
        expected = self._tuned_rate * cfg.rise_window_s
        return len(self._recent(now)) > expected + cfg.rise_sigmas * max(expected, 1.0) ** 0.5

    def _forecast(self, now: float) -> tuple[list[WindowArrival], float, float]:
        """The arrivals of the last ``rise_window_s``, repeated back over a whole window
        (the forecast that the new rate holds), that rate, and where the rise began (-inf:
        unknown). With ``rise_onset`` the rate is the one since the rise began
        (:func:`~dilaserve.schedule.window.rate_onset`) and the arrivals are compressed in
        time to it. With ``rise_forecast_from_window`` the arrivals repeated are the
        window's own, compressed in time to that rate."""
        cfg = self.config
        recent = self._recent(now)
        # Without a finer onset the rise window's start is where the evidence of the new
        # rate begins (``rise_resets_window``); -inf leaves the window as it was.
        evidence = now - cfg.rise_window_s if cfg.rise_resets_window else float("-inf")
        rate, period, onset = len(recent) / cfg.rise_window_s, cfg.rise_window_s, evidence
        if cfg.rise_onset:
            start, since = rate_onset([a.arrival for a in recent], now - cfg.rise_window_s, now)
            faster = at_rate(recent, since) if since > rate else None
            if faster is not None:
                # the compressed seconds repeat back to back, at the new rate throughout
                recent, rate, period, onset = faster, since, len(faster) / since, start
        if cfg.rise_forecast_from_window:
            faster = at_rate(list(self._window), rate)
            if faster is not None:
                recent, period = faster, repeat_period(faster)  # the window's own requests, at the new rate
        copies = int(self._forecast_span() // period) or 1
        shifted = [replace(a, arrival=a.arrival - k * period) for k in range(copies - 1, -1, -1) for a in recent]
        # A compressed block spans its period exactly, so one copy's last arrival and the
        # next copy's first may cross by a rounding error; a replay takes arrivals in order.
        shifted.sort(key=lambda a: a.arrival)
        return shifted, rate, onset

    def _forecast_span(self) -> float:
        """The seconds a rise's forecast spans: ``rise_forecast_s``, at most a window."""
        cfg = self.config
        return min(cfg.rise_forecast_s or cfg.window_s, cfg.window_s)

    def _arrivals(self, now: float) -> list[WindowArrival]:
        """What a plan checked now replays: the last tuning's arrivals when it ran at this
        moment (a forecast after a rise), else the window."""
        if self._evidence is not None and self._evidence[0] == now:
            return self._evidence[1]
        self._trim(now)
        return list(self._window)

    def check_layout(
        self,
        now: float,
        current: Sequence[InstanceSpec],
        target: Sequence[InstanceSpec],
        point: OperatingPoint,
        on_verdict: Callable[[bool], None],
        transition_share: float = 0.0,
        peak_rate: float | None = None,
    ) -> None:
        """Whether moving the cluster from ``current`` to ``target`` (a reconfiguration plan)
        is worth it on the replay; ``on_verdict`` is called with the answer once the worker
        has it (at once for an inline worker; never where the worker is busy or over its
        budget: the cluster stays as it is). The window's arrivals at ``point`` must make at
        least ``min_gain`` more goodput on ``target``. The planner's model prices the classes
        at their tightest SLO; the replay runs the requests themselves, tiers and all, so a
        plan that trades the throughput of the many for the latency of a few is caught here.

        While the plan executes, the instances it stops are gone and those it launches not
        yet there: for ``transition_share`` of the plan's lifetime the cluster is the kept
        instances alone, and the expected goodput after the move blends that replay with the
        target's. Both layouts replay the same ``sample`` share of the nodes, picked from
        each group of nodes the plan treats alike (so the nodes it rebuilds are in the slice),
        under the same share of the arrivals (:func:`~dilaserve.schedule.window.plan_slice`):
        an instance-count slice of a mixed-TP layout is too coarse for this decision, but
        the same nodes under the same arrivals differ only where the plan does. With too
        thin a window there is no evidence, and the planner's own rules decide.

        A plan is made for the load of the window, but it stays in force after the load
        moves, and undoing it takes a drain and a launch, longer than a rise takes to
        arrive. With ``peak_rate`` (arrivals per second, the most the cluster was built to
        carry) above the window's rate, the window's arrivals are also replayed compressed
        to that rate, and ``target`` must not lose there by more than ``min_gain``: a
        layout that buys latency at low load with throughput the peak needs is refused."""
        cfg = self.config
        arrivals = self._arrivals(now)
        if len(arrivals) < cfg.min_arrivals or not current or not target:
            on_verdict(True)
            return
        job = LayoutJob(
            tuple(arrivals),
            tuple(current),
            tuple(target),
            point,
            transition_share,
            cfg.min_gain,
            cfg.warm_plans,
            peak_rate,
            cfg.sample,
            cfg.min_arrivals,
            self._calibration(),
            self._step_factors(),
        )
        tag = next(self._tags)
        self._pending[tag] = _Pending(now, on_verdict=on_verdict, rate=peak_rate)
        if self.worker.busy or not self.worker.submit(tag, job):
            del self._pending[tag]
            log.info("tuner at %.0fs: a plan was not replayed (the control worker is busy): the cluster stays", now)
            return
        self.collect(now, point)

    def layout_pays(
        self,
        now: float,
        current: Sequence[InstanceSpec],
        target: Sequence[InstanceSpec],
        point: OperatingPoint,
        transition_share: float = 0.0,
        peak_rate: float | None = None,
    ) -> bool:
        """:meth:`check_layout`'s verdict at once (False where it is not back yet)."""
        verdicts: list[bool] = []
        self.check_layout(now, current, target, point, verdicts.append, transition_share, peak_rate)
        return bool(verdicts and verdicts[0])

    def _adopt_verdict(self, job: _Pending, verdict: LayoutVerdict) -> None:
        if verdict.peak is not None:
            log.info(
                "tuner at %.0fs: at the peak rate of %.1f/s the plan's layout replays at %.3f against %.3f",
                job.now,
                job.rate,
                verdict.peak[1],
                verdict.peak[0],
            )
        self.plan_checks.append((job.now, verdict.before, verdict.after, verdict.pays))
        log.info(
            "tuner at %.0fs: a plan's layout replays at %.3f against %.3f now: %s",
            job.now,
            verdict.after,
            verdict.before,
            "applied"
            if verdict.pays
            else ("kept the cluster" if verdict.held else "kept the cluster (it loses at the peak rate)"),
        )
        job.on_verdict(verdict.pays)

    def candidates(
        self, current: OperatingPoint, priorities: set[int], now: float = float("inf")
    ) -> list[OperatingPoint]:
        """``current`` first, then every uniform point (each threshold, and adaptive), then,
        with tiers, each tier moved alone to each alternative (with ``local_moves``, to
        adaptive and the thresholds next to its pin), all placed and admitted as
        ``current`` is; last, with ``placement``, ``current`` placed the other way, and with
        ``admission``, ``current`` admitted the other way (taking every arrival only once a
        window has passed since the arrival rate last rose)."""
        uniform = [OperatingPoint.adaptive(), *(OperatingPoint.static(t) for t in self.thresholds)]
        out = [current, *(p.with_fit(current.fit).with_admit(current.admit) for p in uniform)]
        if len(priorities) > 1:
            for p in sorted(priorities, reverse=True):
                out.extend(current.with_pin(p, t) for t in self._moves(current.pin(p)))
        if self.placement:
            out.append(current.with_fit(not current.fit))
        if self.admission and (not current.admit or now >= self._take_all_after):
            out.append(current.with_admit(not current.admit))
        unique, seen = [], set()
        for point in out:
            key = (point.fit, point.admit, *((p, point.pin(p)) for p in sorted(priorities)))
            if key not in seen:
                seen.add(key)
                unique.append(point)
        return unique

    def _moves(self, pin: float | None) -> tuple[float | None, ...]:
        """Where a tier pinned at ``pin`` may move in one tuning: adaptive and every
        threshold, or with ``local_moves`` adaptive and the thresholds next to ``pin``."""
        if not self.config.local_moves or pin is None or pin not in self.thresholds:
            return (None, *self.thresholds)
        ordered = sorted(self.thresholds)
        i = ordered.index(pin)
        return (None, *ordered[max(i - 1, 0) : i + 2])


@dataclass
class _Pending:
    """What a job out with the worker was started for: a tuning (its candidates, the
    point it keeps unless one beats it, the rate it replays) or a plan's check (the
    callback its verdict goes to, the peak rate)."""

    now: float
    candidates: list[OperatingPoint] = field(default_factory=list)
    base: OperatingPoint | None = None
    rate: float | None = None
    rose: bool = False
    #: the order the candidates were replayed in (indices into ``candidates``)
    order: list[int] = field(default_factory=list)
    on_verdict: Callable[[bool], None] | None = None
