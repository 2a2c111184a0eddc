"""The operating-point tuner: it replays the window against each candidate and moves to
the best, with hysteresis, and only when a tuning is due."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dilaserve.cluster.base import InstanceSpec
from dilaserve.control.operating_point import OperatingPoint
from dilaserve.control.predictions import StepCalibration
from dilaserve.engine.state import StepKind
from dilaserve.schedule.tuner import OperatingPointTuner, TunerConfig
from dilaserve.schedule.window import rate_onset
from tests.control.builders import make_request

LAYOUT = [InstanceSpec(f"i{g}", 1, 0, (g,), 4096) for g in range(4)]


class ScriptedReplay:
    """A replay whose goodput per point is a given function of the point (recorded calls)."""

    def __init__(self, score):
        self.score, self.calls, self.samples, self.warm, self.calibrations = score, [], [], [], []
        self.step_factors = []

    def __call__(
        self, arrivals, layout, points, sample=None, warm=False, keep=1, floor=None, calibration=None, step_factors=()
    ):
        self.calls.append((len(arrivals), list(layout), list(points)))
        self.samples.append(sample)
        self.warm.append(warm)
        self.calibrations.append(calibration)
        self.step_factors.append(step_factors)
        return [self.score(p) for p in points]


def _fill(tuner: OperatingPointTuner, n: int, t0: float, t1: float, priorities=(0,)) -> None:
    for i in range(n):
        now = t0 + (t1 - t0) * i / n
        tuner.observe(make_request(f"r{t0}-{i}", arrival=now, priority=priorities[i % len(priorities)]), now)


def test_moves_to_the_best_replayed_point_once_a_tuning_is_due():
    replay = ScriptedReplay(lambda p: 0.9 if p == OperatingPoint.static(0.8) else 0.5)
    tuner = OperatingPointTuner(replay, (0.7, 0.8, 0.9), TunerConfig(interval_s=10, window_s=10, sample=1.0))
    _fill(tuner, 50, 0.0, 9.0)
    assert tuner.maybe_tune(9.0, LAYOUT, OperatingPoint.adaptive()) is None and not replay.calls  # not due yet
    assert tuner.maybe_tune(10.0, LAYOUT, OperatingPoint.adaptive()) == OperatingPoint.static(0.8)
    ((n, layout, points),) = replay.calls
    assert n == 50 and layout == LAYOUT
    labels = [p.label for p in points]
    assert labels[0] == "adaptive" and set(labels) == {"adaptive", "static@0.7", "static@0.8", "static@0.9"}


def test_the_last_tunings_best_replays_right_after_the_current_point_and_the_order_decides_nothing():
    """A candidate stops once it cannot beat the best replayed before it, so the tuner
    replays the last tuning's best candidates first; the scores go back to their
    candidates, so a tie still breaks in the candidates' own order."""
    scores = {"static@0.7": 0.85, "static@0.8": 0.9}
    replay = ScriptedReplay(lambda p: scores.get(p.label, 0.5))
    tuner = OperatingPointTuner(replay, (0.7, 0.8, 0.9), TunerConfig(interval_s=10, window_s=10, sample=1.0))
    _fill(tuner, 50, 0.0, 10.0)
    assert tuner.maybe_tune(10.0, LAYOUT, OperatingPoint.adaptive()) == OperatingPoint.static(0.8)
    scores.update({"adaptive": 0.95, "static@0.7": 0.95})  # a tie, replayed in the other order
    _fill(tuner, 50, 10.0, 20.0)
    assert tuner.maybe_tune(20.0, LAYOUT, OperatingPoint.static(0.8)) == OperatingPoint.adaptive()
    order = [p.label for p in replay.calls[1][2]]
    assert order[:2] == ["static@0.8", "static@0.7"] and order.index("static@0.7") < order.index("adaptive")
    assert [c for c in tuner.candidates(OperatingPoint.static(0.8), {0})][1] == OperatingPoint.adaptive()
    assert tuner.records[-1].replayed == {"static@0.8": 0.9, "adaptive": 0.95, "static@0.7": 0.95, "static@0.9": 0.5}


@pytest.mark.parametrize("on", [True, False])
def test_a_replay_starts_from_the_live_calibration_of_its_tuning_only_where_asked(on):
    """With ``replay_calibration`` every replay (a point's and a plan's) is handed what the
    live predictions have learned at the tuning; without it, nothing."""
    learned = [StepCalibration(0.5, ((0, -0.4, 9),))]
    replay = ScriptedReplay(lambda p: 0.5)
    cfg = TunerConfig(interval_s=10, window_s=10, sample=1.0, replay_calibration=on)
    tuner = OperatingPointTuner(replay, (0.7, 0.9), cfg, learned=lambda: learned[-1])
    _fill(tuner, 50, 0.0, 10.0)
    tuner.maybe_tune(10.0, LAYOUT, OperatingPoint.adaptive())
    learned.append(StepCalibration(0.7))
    tuner.layout_pays(10.0, LAYOUT, LAYOUT[:2], OperatingPoint.adaptive())
    assert replay.calibrations == ([learned[0]] + [learned[1]] * 2 if on else [None] * 3)


@pytest.mark.parametrize("on", [True, False])
def test_a_replay_steps_on_the_machine_the_live_control_plane_has_learned(on):
    """With ``replay_step_time`` (the default) every replay, a point's and a plan's, is
    handed the live step-time factors at its tuning (those still at the profile left out);
    without it, none."""
    factors = [{(1, StepKind.CACHE): 8.0, (1, StepKind.RECOMPUTE): 1.0}]
    replay = ScriptedReplay(lambda p: 0.5)
    cfg = TunerConfig(interval_s=10, window_s=10, sample=1.0, replay_step_time=on)
    tuner = OperatingPointTuner(replay, (0.7, 0.9), cfg, machine=lambda: factors[-1])
    _fill(tuner, 50, 0.0, 10.0)
    tuner.maybe_tune(10.0, LAYOUT, OperatingPoint.adaptive())
    factors.append({(1, StepKind.RECOMPUTE): 2.0})
    tuner.layout_pays(10.0, LAYOUT, LAYOUT[:2], OperatingPoint.adaptive())
    first, later = (((1, StepKind.CACHE), 8.0),), (((1, StepKind.RECOMPUTE), 2.0),)
    assert replay.step_factors == ([first] + [later] * 2 if on else [()] * 3)


def test_keeps_the_current_point_unless_another_beats_it_by_the_margin():
    replay = ScriptedReplay(lambda p: 0.802 if p == OperatingPoint.static(0.7) else 0.8)
    tuner = OperatingPointTuner(replay, (0.7, 0.9), TunerConfig(interval_s=5, window_s=5, sample=1.0, min_gain=0.005))
    _fill(tuner, 50, 0.0, 5.0)
    assert tuner.maybe_tune(5.0, LAYOUT, OperatingPoint.adaptive()) is None
    assert tuner.records[-1].point == "adaptive"


def test_only_the_window_is_replayed_and_a_thin_window_is_not():
    replay = ScriptedReplay(lambda p: 0.5)
    tuner = OperatingPointTuner(replay, (0.9,), TunerConfig(interval_s=10, window_s=5, sample=0.5, min_arrivals=10))
    _fill(tuner, 30, 0.0, 10.0)  # 15 in the last 5 s: 7.5 sampled, under 10
    tuner.maybe_tune(10.0, LAYOUT, OperatingPoint.adaptive())
    assert not replay.calls
    _fill(tuner, 60, 10.0, 20.0)
    tuner.maybe_tune(20.0, LAYOUT, OperatingPoint.adaptive())
    assert replay.calls and replay.calls[0][0] == 30  # the arrivals of (15, 20]


def test_with_tiers_each_tier_is_moved_alone():
    tuner = OperatingPointTuner(ScriptedReplay(lambda p: 0.5), (0.7, 0.9), TunerConfig(sample=1.0))
    current = OperatingPoint.static(0.9)
    cands = tuner.candidates(current, {0, 1})
    assert cands[0] == current
    assert current.with_pin(1, 0.7) in cands and current.with_pin(0, None) in cands
    keys = [tuple(c.pin(p) for p in (0, 1)) for c in cands]
    assert len(keys) == len(set(keys))  # no point replayed twice


def test_a_plan_is_applied_only_where_its_layout_replays_better():
    tp4 = [InstanceSpec("big", 4, 0, (0, 1, 2, 3), 16384)]

    # A replay that scores the layout, not the point: more instances, more goodput.
    class LayoutReplay(ScriptedReplay):
        def __call__(
            self, arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()
        ):
            assert sample == 1.0  # a plan is judged on the whole window and cluster
            self.calls.append((len(arrivals), list(layout), list(points)))
            return [0.1 * len(layout) for _ in points]

    lr = LayoutReplay(None)
    tuner = OperatingPointTuner(lr, (0.9,), TunerConfig(window_s=10, sample=1.0))
    _fill(tuner, 50, 0.0, 9.0)
    assert not tuner.layout_pays(9.0, LAYOUT, tp4, OperatingPoint.static(0.9))  # 4 TP-1 beat 1 TP-4
    assert tuner.layout_pays(9.0, tp4, LAYOUT, OperatingPoint.static(0.9))
    assert [c[3] for c in tuner.plan_checks] == [False, True]
    thin = OperatingPointTuner(lr, (0.9,), TunerConfig(window_s=10, sample=1.0))
    assert thin.layout_pays(9.0, LAYOUT, tp4, OperatingPoint.static(0.9))  # no evidence: the planner decides


def test_a_plan_must_also_repay_its_transition():
    """Three TP-1 instances replay better than two (0.3 against 0.2), but a plan that keeps
    one of the two while it launches the others runs on that one alone meanwhile (0.1): at
    half its lifetime in transition the move is worth 0.2, no gain; at a tenth, 0.28."""

    class LayoutReplay(ScriptedReplay):
        def __call__(
            self, arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()
        ):
            self.calls.append((len(arrivals), list(layout), list(points)))
            return [0.1 * len(layout) for _ in points]

    two, three = LAYOUT[:2], [LAYOUT[0], *(InstanceSpec(f"n{g}", 1, 1, (g,), 4096) for g in range(2))]
    tuner = OperatingPointTuner(LayoutReplay(None), (0.9,), TunerConfig(window_s=10, sample=1.0))
    _fill(tuner, 50, 0.0, 9.0)
    point = OperatingPoint.static(0.9)
    assert tuner.layout_pays(9.0, two, three, point)
    assert not tuner.layout_pays(9.0, two, three, point, transition_share=0.5)
    assert tuner.layout_pays(9.0, two, three, point, transition_share=0.1)
    assert tuner.plan_checks[-1][2] == pytest.approx(0.1 * 0.1 + 0.9 * 0.3)


def test_a_plan_that_loses_at_the_peak_rate_is_refused():
    """One TP-4 instance replays better than four TP-1 at the window's 5 arrivals/s and worse
    once the same arrivals come at the 20/s the four were built to carry: with that peak
    rate the plan is refused; with none, or one under the window's own rate, it is applied."""
    tp4 = [InstanceSpec("big", 4, 0, (0, 1, 2, 3), 16384)]

    class RateReplay(ScriptedReplay):
        def __call__(
            self, arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()
        ):
            rate = len(arrivals) / (arrivals[-1].arrival - arrivals[0].arrival)
            self.calls.append(rate)
            big = len(layout) == 1
            return [(0.8 if big else 0.6) if rate < 10 else (0.3 if big else 0.6) for _ in points]

    replay = RateReplay(None)
    tuner = OperatingPointTuner(replay, (0.9,), TunerConfig(window_s=10, sample=1.0))
    _fill(tuner, 50, 0.0, 10.0)
    point = OperatingPoint.static(0.9)
    assert tuner.layout_pays(10.0, LAYOUT, tp4, point)
    assert not tuner.layout_pays(10.0, LAYOUT, tp4, point, peak_rate=20.0)
    assert max(replay.calls) == pytest.approx(20.0)  # the window's arrivals, compressed to the peak
    assert tuner.layout_pays(10.0, LAYOUT, tp4, point, peak_rate=4.0)
    assert [c[3] for c in tuner.plan_checks] == [True, False, True]


def test_with_placement_the_current_point_is_also_weighed_placed_the_other_way():
    current = OperatingPoint.static(0.8)
    plain = OperatingPointTuner(ScriptedReplay(lambda p: 0.5), (0.7, 0.8), TunerConfig(sample=1.0))
    assert all(not c.fit for c in plain.candidates(current, {0}))
    tuner = OperatingPointTuner(ScriptedReplay(lambda p: 0.5), (0.7, 0.8), TunerConfig(sample=1.0), placement=True)
    cands = tuner.candidates(current, {0})
    assert cands[0] == current and cands[-1] == current.with_fit(True)
    assert [c.fit for c in cands].count(True) == 1  # the thresholds are weighed as placed now
    fitted = tuner.candidates(current.with_fit(True), {0})
    assert all(c.fit for c in fitted[:-1]) and not fitted[-1].fit


def test_the_tuner_moves_to_slack_placement_where_it_replays_better():
    replay = ScriptedReplay(lambda p: 0.7 if p.fit else 0.6)
    tuner = OperatingPointTuner(replay, (0.9,), TunerConfig(interval_s=5, window_s=5, sample=1.0), placement=True)
    _fill(tuner, 50, 0.0, 5.0)
    chosen = tuner.maybe_tune(5.0, LAYOUT, OperatingPoint.adaptive())
    assert chosen == OperatingPoint.adaptive().with_fit(True) and chosen.label == "adaptive+fit"


def test_with_admission_the_current_point_is_also_weighed_admitted_the_other_way():
    """At low load a refusal on a pessimistic prediction loses a request that would have
    made it: the tuner weighs taking every arrival, and moves there where it replays better."""
    current = OperatingPoint.static(0.8)
    plain = OperatingPointTuner(ScriptedReplay(lambda p: 0.5), (0.7, 0.8), TunerConfig(sample=1.0))
    assert all(c.admit for c in plain.candidates(current, {0}))
    replay = ScriptedReplay(lambda p: 0.6 if p.admit else 0.7)
    tuner = OperatingPointTuner(replay, (0.7, 0.8), TunerConfig(interval_s=5, window_s=5, sample=1.0), admission=True)
    cands = tuner.candidates(current, {0})
    assert cands[-1] == current.with_admit(False) and [c.admit for c in cands].count(False) == 1
    open_ = tuner.candidates(current.with_admit(False), {0})
    assert all(not c.admit for c in open_[:-1]) and open_[-1].admit  # thresholds weighed as admitted now
    _fill(tuner, 50, 0.0, 5.0)
    assert tuner.maybe_tune(5.0, LAYOUT, current) == current.with_admit(False)


def _arrived(segments, start: float, end: float) -> int:
    """How many of :func:`_arrive`'s arrivals over ``segments`` (``(t0, t1, rate)``) fell in
    [start, end]: a rise's window, counted from the arrivals themselves (the tuner's window
    has moved on by then)."""
    times = (t0 + i / rate for t0, t1, rate in segments for i in range(int(round((t1 - t0) * rate))))
    return sum(1 for t in times if start <= t <= end)


def _arrive(tuner: OperatingPointTuner, t0: float, t1: float, rate: float, point: OperatingPoint):
    """Arrivals at ``rate`` per second over [t0, t1), the tuner asked after each (as the
    scheduler does); returns the points it moved to, with their times."""
    moves, n = [], int(round((t1 - t0) * rate))
    for i in range(n):
        now = t0 + i / rate
        tuner.observe(make_request(f"a{now:.4f}", arrival=now), now)
        moved = tuner.maybe_tune(now, LAYOUT, point)
        if moved is not None:
            point = moved
            moves.append((now, moved))
    return moves, point


def test_a_rise_in_arrivals_tunes_at_once_on_the_new_rate_with_admission_on():
    """Taking every arrival was chosen on 10 arrivals a second. When 40 a second arrive the
    replay that chose it says nothing of them: the tuner tunes at once, on the last seconds
    repeated over a window, with admission back on and no take-all candidate."""
    replay = ScriptedReplay(lambda p: 0.7 if not p.admit else 0.6)
    cfg = TunerConfig(interval_s=10, window_s=10, sample=1.0, rise_window_s=2.5, min_arrivals=10)
    tuner = OperatingPointTuner(replay, (0.8,), cfg, admission=True)
    moves, point = _arrive(tuner, 0.0, 10.5, 10.0, OperatingPoint.static(0.8))
    assert [p.admit for _, p in moves] == [False] and not tuner.rises  # chosen at 10 s, no rise at a steady rate
    calls = len(replay.calls)
    moves, point = _arrive(tuner, 10.5, 13.0, 40.0, point)
    assert tuner.rises and moves[0][0] == tuner.rises[0] and moves[0][1].admit
    assert tuner.rises[0] < 11.5  # within a second of the rise, not at the next interval (20 s)
    n, _, points = replay.calls[calls]
    assert all(p.admit for p in points)  # no take-all candidate while the window holds the old load
    # the forecast: the last 2.5 s (what arrived in them) repeated four times over the window
    rise = tuner.rises[0]
    assert n == 4 * _arrived([(0.0, 10.5, 10.0), (10.5, 13.0, 40.0)], rise - 2.5, rise)
    assert point.admit  # later rises (the rate keeps climbing here) never reopen admission
    # Each tuning's record says whether a rise tripped it and where it started from.
    first, at_rise = tuner.records[0], next(r for r in tuner.records if r.time == rise)
    assert not first.rose and first.point == "static@0.8+take-all" and first.start == "static@0.8"
    assert at_rise.rose and at_rise.start == "static@0.8"  # a rise starts from the point admitted again
    assert at_rise.replayed[at_rise.point] == 0.6 and at_rise.stopped == ()


def test_a_rise_forecast_may_span_less_than_a_window():
    replay = ScriptedReplay(lambda p: 0.7 if not p.admit else 0.6)
    cfg = TunerConfig(interval_s=10, window_s=10, sample=1.0, rise_window_s=2.5, min_arrivals=10, rise_forecast_s=5)
    tuner = OperatingPointTuner(replay, (0.8,), cfg, admission=True)
    _, point = _arrive(tuner, 0.0, 10.5, 10.0, OperatingPoint.static(0.8))
    calls = len(replay.calls)
    _arrive(tuner, 10.5, 13.0, 40.0, point)
    rise = tuner.rises[0]
    steps = [(0.0, 10.5, 10.0), (10.5, 13.0, 40.0)]
    assert replay.calls[calls][0] == 2 * _arrived(steps, rise - 2.5, rise)  # the last 2.5 s twice, not four times
    # Replayed warm (the short forecast starts with the queue its rate builds); the
    # window's tunings before the rise were cold.
    assert replay.warm[calls] and not any(replay.warm[:calls])
    longer = OperatingPointTuner(replay, (0.8,), replace(cfg, rise_forecast_s=40), admission=True)
    _, point = _arrive(longer, 0.0, 10.5, 10.0, OperatingPoint.static(0.8))
    calls = len(replay.calls)
    _arrive(longer, 10.5, 13.0, 40.0, point)
    rise = longer.rises[0]
    assert replay.calls[calls][0] == 4 * _arrived(steps, rise - 2.5, rise)  # capped at the 10-s window
    assert not replay.warm[calls]  # a whole window's forecast replays cold, as it always did
    cold = OperatingPointTuner(replay, (0.8,), replace(cfg, warm_rises=False), admission=True)
    _, point = _arrive(cold, 0.0, 10.5, 10.0, OperatingPoint.static(0.8))
    calls = len(replay.calls)
    _arrive(cold, 10.5, 13.0, 40.0, point)
    assert cold.rises and not replay.warm[calls]


def test_a_plan_checked_at_a_rise_replays_the_forecast():
    class LayoutReplay(ScriptedReplay):
        def __call__(
            self, arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()
        ):
            self.calls.append((len(arrivals), list(layout), list(points)))
            return [0.5 for _ in points]

    replay = LayoutReplay(None)
    cfg = TunerConfig(interval_s=10, window_s=10, sample=1.0, rise_window_s=2.5, min_arrivals=10)
    tuner = OperatingPointTuner(replay, (0.8,), cfg)
    _arrive(tuner, 0.0, 10.5, 10.0, OperatingPoint.static(0.8))
    _arrive(tuner, 10.5, 11.5, 60.0, OperatingPoint.static(0.8))
    rise = tuner.rises[-1]  # the rate climbs through the 2.5 s: the last rise tuned on its top
    forecast = replay.calls[-1][0]
    tuner.layout_pays(rise, LAYOUT, LAYOUT[:2], OperatingPoint.static(0.8))
    assert replay.calls[-1][0] == forecast  # the plan is judged on the rate now, not on the window's
    tuner.layout_pays(rise + 0.5, LAYOUT, LAYOUT[:2], OperatingPoint.static(0.8))
    assert replay.calls[-1][0] == len(tuner._window)  # later, on the window again


def test_the_rise_settings_are_validated():
    with pytest.raises(ValueError, match="rise_window_s"):
        TunerConfig(window_s=10, rise_window_s=20)
    with pytest.raises(ValueError, match="rise_sigmas"):
        TunerConfig(rise_sigmas=0)
    with pytest.raises(ValueError, match="rise_forecast_s"):
        TunerConfig(window_s=10, rise_window_s=5, rise_forecast_s=2)


def test_a_tuning_that_keeps_the_point_puts_the_next_off_and_a_switch_brings_it_back():
    best = {"point": OperatingPoint.adaptive()}
    replay = ScriptedReplay(lambda p: 0.9 if p == best["point"] else 0.5)
    cfg = TunerConfig(interval_s=10, window_s=10, sample=1.0, min_arrivals=10, max_backoff=4)
    tuner = OperatingPointTuner(replay, (0.7, 0.8), cfg)
    point, tuned = OperatingPoint.adaptive(), []
    for i in range(1500):  # 10 arrivals a second for 150 s
        now = i / 10
        tuner.observe(make_request(f"s{i}", arrival=now), now)
        if now >= 75 and best["point"] != OperatingPoint.static(0.8):
            best["point"] = OperatingPoint.static(0.8)  # the best point moves half way
        n = len(tuner.records)
        point = tuner.maybe_tune(now, LAYOUT, point) or point
        if len(tuner.records) > n:
            tuned.append(round(now))
    # kept at 10 s: next at 30, 70 (kept: the gap doubles, up to 40 s); the switch at 110
    # brings the interval back to 10 s
    assert tuned[:4] == [10, 30, 70, 110] and tuned[4] == 120
    assert point == OperatingPoint.static(0.8)
    with pytest.raises(ValueError, match="max_backoff"):
        TunerConfig(max_backoff=0.5)


def test_the_onset_rate_is_the_rate_since_a_step_and_the_mean_without_one():
    rng = np.random.default_rng(0)
    before, after = np.sort(rng.uniform(0.0, 4.0, 120)), np.sort(rng.uniform(4.0, 5.0, 70))
    onset, rate = rate_onset([*before, *after], 0.0, 5.0)
    assert 3.5 < onset < 4.2 and 60 < rate < 80  # 30/s, then 70/s for the last second
    steady = np.sort(rng.uniform(0.0, 5.0, 300)).tolist()
    assert 55 < rate_onset(steady, 0.0, 5.0)[1] < 70  # no step: about the mean, 60/s
    assert rate_onset([4.9, 4.95, 4.99], 0.0, 5.0) == (0.0, 3 / 5.0)  # three arrivals are no new rate


def test_with_rise_onset_a_step_in_the_rate_trips_one_tuning_at_its_height():
    """A step from 10 to 60 arrivals a second: the rise window's rate forecasts part of the
    step and trips again as the window fills; the onset's forecasts the new rate at once."""

    def run(onset: bool) -> tuple[list[float], int, int]:
        replay = ScriptedReplay(lambda p: 0.5)
        cfg = TunerConfig(interval_s=10, window_s=10, sample=1.0, rise_window_s=2.5, min_arrivals=10, rise_onset=onset)
        tuner = OperatingPointTuner(replay, (0.8,), cfg)
        _, point = _arrive(tuner, 0.0, 10.5, 10.0, OperatingPoint.static(0.8))
        calls = len(replay.calls)
        _arrive(tuner, 10.5, 14.0, 60.0, point)
        first = replay.calls[calls][0]  # the first rise's forecast: arrivals over one window
        _arrive(tuner, 14.0, 22.0, 60.0, point)  # the interval's tuning, ten seconds after the rise
        low = sum(1 for a in tuner._window if a.arrival < 10.5)  # what it replayed of the low rate
        return tuner.rises, first, low

    (window_rises, window_first, window_low), (onset_rises, onset_first, onset_low) = run(False), run(True)
    assert len(onset_rises) < len(window_rises)
    assert onset_first > 1.5 * window_first  # forecast nearer 60/s x 10 s than the window's average
    assert window_low > 0 and onset_low <= 2  # the window starts where the rise did (give or take)


def test_an_onset_forecast_is_in_time_order_on_random_ramps():
    """The onset's forecast repeats the rise window's arrivals compressed to the new rate,
    each copy spanning the period exactly: rounding made one copy's last arrival fall after
    the next copy's first on 85 of 200 random steps, and the simulator's replay refused
    the window (its requests must come in order)."""
    forecasts: list[list[float]] = []

    def record(arrivals, layout, points, **kw):
        forecasts.append([a.arrival for a in arrivals])
        return [0.5] * len(points)

    cfg = TunerConfig(interval_s=10, window_s=10, sample=1.0, rise_window_s=2.5, min_arrivals=10, rise_onset=True)
    for seed in range(40):
        rng = np.random.default_rng(seed)
        tuner = OperatingPointTuner(record, (0.8,), cfg)
        times = np.concatenate([np.sort(rng.uniform(0, 10.5, 105)), np.sort(rng.uniform(10.5, 14, 210))])
        point = OperatingPoint.static(0.8)
        for i, now in enumerate(times.tolist()):
            tuner.observe(make_request(f"a{i}", arrival=now), now)
            point = tuner.maybe_tune(now, LAYOUT, point) or point
        assert tuner.rises and all(t == sorted(t) for t in forecasts), seed


def test_a_forecast_from_the_window_replays_its_distinct_requests_at_the_rise_rate():
    """A step from 10 to 60 arrivals a second, each arrival a prompt of its own length. The
    default forecast repeats the rise window's few seconds over a window, so each of its
    requests comes several times; from the window, the forecast's requests are the window's
    own, each once per copy, at the rate of the rise, in time order."""

    def first_forecast(from_window: bool) -> list:
        forecasts: list[list] = []

        def record(arrivals, layout, points, **kw):
            forecasts.append(list(arrivals))
            return [0.5] * len(points)

        cfg = TunerConfig(
            interval_s=10,
            window_s=10,
            sample=1.0,
            rise_window_s=2.5,
            min_arrivals=10,
            rise_forecast_from_window=from_window,
        )
        tuner = OperatingPointTuner(record, (0.8,), cfg)
        point, i = OperatingPoint.static(0.8), 0
        for t0, t1, rate in ((0.0, 10.5, 10.0), (10.5, 14.0, 60.0)):
            for k in range(int(round((t1 - t0) * rate))):
                now, i = t0 + k / rate, i + 1
                tuner.observe(make_request(f"a{i}", prompt=10 + i, arrival=now), now)
                point = tuner.maybe_tune(now, LAYOUT, point) or point
        assert tuner.rises
        return forecasts[len(forecasts) - len(tuner.rises)]  # the first rise's replay

    repeated, window = first_forecast(False), first_forecast(True)
    distinct = {a.prompt_tokens for a in window}
    assert len(distinct) > 2 * len({a.prompt_tokens for a in repeated})  # the low rate's requests too
    times = [a.arrival for a in window]
    assert times == sorted(times)
    rate_repeated = len(repeated) / (repeated[-1].arrival - repeated[0].arrival)
    rate_window = len(window) / (times[-1] - times[0])
    assert rate_window == pytest.approx(rate_repeated, rel=0.15)  # both at the rise's rate


def test_after_a_rise_the_next_interval_replays_the_new_rate_and_compares_later_rises_with_it():
    """A step from 10 to 40 arrivals a second. The interval's tuning after the rise replays
    the window from the rise window's start on: the low rate's seconds before it would
    average the two rates, the average would become the rate later rises are compared
    with, and the steady new rate would trip a rise again at once."""
    steps = [(0.0, 10.5, 10.0), (10.5, 13.0, 40.0)]

    def run(resets: bool):
        replay = ScriptedReplay(lambda p: 0.5)
        cfg = TunerConfig(
            interval_s=10, window_s=20, sample=1.0, rise_window_s=2.5, min_arrivals=10, rise_resets_window=resets
        )
        tuner = OperatingPointTuner(replay, (0.8,), cfg)
        _, point = _arrive(tuner, 0.0, 10.5, 10.0, OperatingPoint.static(0.8))
        _arrive(tuner, 10.5, 13.0, 40.0, point)
        last_rise, rises = tuner.rises[-1], len(tuner.rises)
        _arrive(tuner, 13.0, last_rise + 10.5, 40.0, point)
        # the interval's tuning after the last rise (one replay per tuning)
        k, tuned = next((k, t) for k, t in enumerate(r.time for r in tuner.records) if t > last_rise + 9.9)
        _arrive(tuner, last_rise + 10.5, tuned + 3.0, 40.0, point)  # the new rate goes on
        return tuner, last_rise, tuned, replay.calls[k][0], len(tuner.rises) - rises

    reset, last_rise, tuned, replayed, later = run(True)
    assert replayed == _arrived([*steps, (13.0, last_rise + 10.5, 40.0)], last_rise - 2.5, tuned)
    assert later == 0  # the steady new rate trips no rise
    kept, last_rise, tuned, replayed, later = run(False)
    assert replayed == _arrived([*steps, (13.0, last_rise + 10.5, 40.0)], tuned - 20, tuned)  # low seconds too
    assert later >= 1 and kept.rises[-1] - tuned < 1.0  # the window's average made the same rate a rise


def test_a_tiered_tuning_screens_every_candidate_and_decides_among_the_finalists_alone():
    current = OperatingPoint.static(0.8)
    # On the screen (the small slice) pinning tier 1 to 0.7 looks best; on the full sample it
    # is the worst finalist and pinning tier 0 to 0.9 wins.
    screen = {current.with_pin(1, 0.7): 0.9, current.with_pin(0, 0.9): 0.8, current.with_pin(0, 0.7): 0.7}
    full = {current.with_pin(1, 0.7): 0.4, current.with_pin(0, 0.9): 0.95, current.with_pin(0, 0.7): 0.6}
    replay = ScriptedReplay(lambda p: 0.5)
    replay.score = lambda p: (screen if replay.samples[-1] == 0.125 else full).get(p, 0.5)
    cfg = TunerConfig(interval_s=10, window_s=10, sample=0.5, min_arrivals=10, screen=0.125, finalists=3)
    tuner = OperatingPointTuner(replay, (0.7, 0.8, 0.9), cfg)
    _fill(tuner, 100, 0.0, 9.0, priorities=(0, 1))
    assert tuner.maybe_tune(10.0, LAYOUT, current) == current.with_pin(0, 0.9)
    (_, _, screened), (_, _, finals) = replay.calls
    assert replay.samples == [0.125, None]  # the screen's slice, then the tuner's own sample
    cands = tuner.candidates(current, {0, 1}, 10.0)
    assert sorted(screened, key=cands.index) == cands[1:]  # every other candidate is screened, once
    assert finals[0] == current and set(finals[1:]) == set(screen)  # the current point and the three best
    scores = tuner.records[-1].replayed
    assert sum(s == float("-inf") for s in scores.values()) == len(cands) - 4  # the rest never win


def test_a_window_of_one_tier_is_screened_only_when_asked():
    replay = ScriptedReplay(lambda p: 0.5)
    cfg = TunerConfig(interval_s=10, window_s=10, sample=0.5, min_arrivals=10, screen=0.125)
    tuner = OperatingPointTuner(replay, (0.7, 0.8, 0.9), cfg)
    _fill(tuner, 100, 0.0, 9.0)
    tuner.maybe_tune(10.0, LAYOUT, OperatingPoint.adaptive())
    assert replay.samples == [None] and len(replay.calls[0][2]) == 4  # every candidate once, on the sample
    with pytest.raises(ValueError, match="screen"):
        TunerConfig(screen=0.0)
    # With screen_one_tier the others are ranked on the screen, and the switch is decided on
    # the sample between the current point and the best of them alone.
    scores = {"static@0.7": 0.9, "static@0.8": 0.6}
    asked = ScriptedReplay(lambda p: scores.get(p.label, 0.5))
    tuner = OperatingPointTuner(asked, (0.7, 0.8, 0.9), replace(cfg, screen_one_tier=True))
    _fill(tuner, 100, 0.0, 9.0)
    assert tuner.maybe_tune(10.0, LAYOUT, OperatingPoint.adaptive()) == OperatingPoint.static(0.7)
    assert asked.samples == [0.125, None]
    assert [p.label for p in asked.calls[1][2]] == ["adaptive", "static@0.7"]


def test_with_local_moves_a_tier_moves_a_step_from_its_pin_or_anywhere_from_adaptive():
    thresholds = (0.5, 0.6, 0.7, 0.8, 0.9)
    local = OperatingPointTuner(ScriptedReplay(lambda p: 0.5), thresholds, TunerConfig(local_moves=True))
    wide = OperatingPointTuner(ScriptedReplay(lambda p: 0.5), thresholds, TunerConfig(local_moves=False))
    current = OperatingPoint.per_tier({1: 0.7})  # tier 0 adaptive
    cands = local.candidates(current, {0, 1})
    tier1 = {c.pin(1) for c in cands if c.pin(0) is None and c.default is None}
    assert tier1 == {None, 0.6, 0.7, 0.8}  # a step either way, or adaptive
    assert {c.pin(0) for c in cands if c.pin(1) == 0.7} == {None, *thresholds}  # from adaptive: anywhere
    assert all(OperatingPoint.static(t) in cands for t in thresholds)  # the uniform jumps stay
    assert set(cands) < set(wide.candidates(current, {0, 1}))


@pytest.mark.parametrize("unheld", [True, False])
def test_a_point_a_rise_chose_is_weighed_without_hysteresis_at_the_next_interval(unheld):
    """A rise chose 0.7 by a hair on its forecast; the interval's tuning after it replays the
    window's own arrivals, where 0.8 leads by less than ``min_gain``. With
    ``rise_point_unheld`` it moves to 0.8, and the window's average (the low seconds and
    the new rate) is not the rate later rises are compared with, as the window replayed the
    rise's arrivals at their own rate: the steady new rate trips no rise at once."""
    scores = {"static@0.8": 0.9, "static@0.7": 0.8}
    replay = ScriptedReplay(lambda p: scores.get(p.label, 0.5) - (0.0 if p.admit else 0.2))
    cfg = TunerConfig(
        interval_s=10, window_s=20, sample=1.0, rise_window_s=2.5, min_arrivals=10, rise_point_unheld=unheld
    )
    tuner = OperatingPointTuner(replay, (0.7, 0.8), cfg, admission=True)
    _, point = _arrive(tuner, 0.0, 10.5, 10.0, OperatingPoint.static(0.8))
    scores.update({"static@0.7": 0.906, "static@0.8": 0.9})  # the forecast: 0.7, past min_gain by a hair
    _, point = _arrive(tuner, 10.5, 11.5, 40.0, point)
    assert tuner.rises and point == OperatingPoint.static(0.7)
    rises = len(tuner.rises)
    scores.update({"static@0.7": 0.9, "static@0.8": 0.903})  # the window: 0.8, inside min_gain
    _, point = _arrive(tuner, 11.5, 25.0, 40.0, point)
    interval = next(r.time for r in tuner.records if r.time > tuner.rises[rises - 1] + 9.9)
    assert point == (OperatingPoint.static(0.8) if unheld else OperatingPoint.static(0.7))
    later = [t for t in tuner.rises[rises:] if t >= interval]
    assert (not later) if unheld else later and later[0] - interval < 1.0
