"""What keeps the tuner cheap: a plan's check replays a slice of the nodes, the same in both
layouts, and a candidate replay stops once it can no longer beat the best one so far."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dilaserve.control.operating_point import OperatingPoint
from dilaserve.predict.replay import ReplayTable
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.reconfig.plan import layout_from_node_counts, static_layout
from dilaserve.schedule.window import Bound, LayoutJob, WindowArrival, plan_slice
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.run import REQUEST_COLUMNS, BaseSimulator
from dilaserve.sim.simulator import SimConfig
from dilaserve.sim.window_replay import _Cutoff
from dilaserve.sim.workload import Workload, WorkloadRequest
from tests.sim.builders import predictors, quality, small_setting, tp1_dilaserve_replay, varied_dynamics

CLUSTER = ClusterConfig(nodes=4, gpus_per_node=4)
ARRIVALS = [WindowArrival(0.01 * i, 100, 128, 1.0, i % 3, 0.0) for i in range(2000)]


def _nodes(layout) -> set[int]:
    return {s.node for s in layout}


def test_a_plan_is_checked_on_the_nodes_it_rebuilds_and_a_share_of_those_it_keeps():
    now = layout_from_node_counts(CLUSTER, [{1: 4}] * 4)
    plan = layout_from_node_counts(CLUSTER, [{1: 4}, {1: 4}, {1: 4}, {2: 2}])  # rebuilds node 3
    arrivals, before, after, share = plan_slice(ARRIVALS, now, plan, 0.25)
    assert 3 in _nodes(before) and _nodes(before) == _nodes(after)  # the same nodes, the rebuilt one among them
    assert len(_nodes(before)) == 2 and share == 0.5  # one of the three kept nodes, and the rebuilt one
    assert [s.tp for s in after if s.node == 3] == [2, 2]
    assert abs(len(arrivals) - share * len(ARRIVALS)) < 0.1 * share * len(ARRIVALS)  # the load per GPU holds
    assert plan_slice(ARRIVALS, now, plan, 0.25) == (arrivals, before, after, share)  # from the window alone
    uniform = plan_slice(ARRIVALS, now, layout_from_node_counts(CLUSTER, [{2: 2}] * 4), 0.25)
    assert len(_nodes(uniform[1])) == 1 and uniform[3] == 0.25  # every node treated alike: one of them


def test_a_thin_window_or_a_whole_sample_checks_the_whole_cluster():
    now = layout_from_node_counts(CLUSTER, [{1: 4}] * 4)
    plan = layout_from_node_counts(CLUSTER, [{2: 2}] * 4)
    assert plan_slice(ARRIVALS, now, plan, 1.0) == (ARRIVALS, now, plan, 1.0)
    thin = plan_slice(ARRIVALS[:100], now, plan, 0.25, min_arrivals=60)  # a quarter is 25: grown to 60 and more
    assert len(thin[0]) >= 50 and len(_nodes(thin[1])) >= 3


def test_a_sampled_plan_check_replays_both_layouts_on_the_same_slice():
    calls = []

    def replay(arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()):
        calls.append((tuple(arrivals), tuple(layout), sample))
        return [0.1 * len(layout) for _ in points]

    now = layout_from_node_counts(CLUSTER, [{1: 4}] * 4)
    plan = layout_from_node_counts(CLUSTER, [{1: 4}] * 3 + [{4: 1}])
    job = LayoutJob(tuple(ARRIVALS), tuple(now), tuple(plan), OperatingPoint.static(0.9), 0.0, 0.005, True, None, 0.25)
    verdict = job.run(replay)
    (a0, l0, s0), (a1, l1, s1) = calls
    assert a0 == a1 and len(a0) < len(ARRIVALS) and s0 == s1 == 1.0  # the slice is the job's, not the replay's
    assert _nodes(l0) == _nodes(l1) == {0, 3} and not verdict.pays  # four TP-1 beat one TP-4 here


def test_a_candidate_that_cannot_beat_the_best_stops_early_and_scores_below_it():
    """On a window that overloads the cluster at 0.9, pinning 0.5 serves more on time. Replayed
    after 0.5, 0.9 stops once its losses exceed what 0.5 lost: its score is a bound, at
    least its full replay's and still below 0.5's, so the choice is the full replays'."""
    replay, setting = tp1_dilaserve_replay()
    arrivals = [WindowArrival(0.02 * i, 200, 256, 0.6, 0, 0.0) for i in range(300)]
    layout = static_layout(setting.cluster, 1)
    fast, slow = OperatingPoint.static(0.5), OperatingPoint.static(0.9)
    (alone,) = replay(arrivals, layout, [slow])
    best, bound = replay(arrivals, layout, [fast, slow])
    assert alone <= bound < best
    # A stopped candidate's score says it is a bound (a tuning's log prints it "<=..."),
    # and it stays one through a worker process's pickle; a whole replay's is a plain float.
    assert isinstance(bound, Bound) and repr(bound) == f"<={bound:.4f}"
    assert isinstance(pickle.loads(pickle.dumps(bound)), Bound) and not isinstance(best, Bound)
    assert replay(arrivals, layout, [slow, fast])[0] == alone  # the first candidate always runs to its end
    assert replay(arrivals, layout, [fast, slow], keep=2) == [best, alone]  # a screen ranks the two best exactly


def _row(request_id: str, met: bool, quality: float | None) -> tuple:
    row = dict.fromkeys(REQUEST_COLUMNS)
    row.update(request_id=request_id, met_slo=met, quality=quality)
    return tuple(row.values())


def test_a_request_past_its_deadline_counts_as_lost_before_it_finishes():
    """A scored request still running past its deadline misses whatever comes next: the
    give-up rule counts it at once, never twice, and never a warm-up copy's request."""
    deadlines = {"window-0": 1.0, "window-1": 5.0, "window-2": 9.0}
    cut = _Cutoff(deadlines, best=1.0 - 1.5 / 3)  # gives up past 1.5 requests lost
    assert not cut(_row("warmup-0", False, None), 4.0)  # window-0 is overdue: 1 lost
    assert cut.lost == 1.0 and cut.bound == pytest.approx(2 / 3)
    assert not cut(_row("window-0", False, None), 4.5)  # recorded late: already counted
    assert cut.lost == 1.0
    assert not cut(_row("window-1", True, 0.75), 4.8)  # on time, a quarter wrong
    assert cut.lost == 1.25
    assert cut(_row("warmup-1", True, 1.0), 9.5)  # window-2 runs past its deadline: 2.25 lost
    assert cut.bound == pytest.approx(1.0 - 2.25 / 3)


def test_a_request_loses_what_its_quality_ceiling_leaves_from_the_start():
    """A request can make at most the quality of the best threshold it may step at: the
    rest is lost before the replay starts, a request recorded loses what it did not make of
    its ceiling, and an overdue one its whole ceiling."""
    deadlines = {"window-0": 1.0, "window-1": 5.0}
    cut = _Cutoff(deadlines, best=0.5, ceilings={"window-0": 0.9, "window-1": 0.8})
    assert cut.lost == pytest.approx(0.3) and not cut.stopped
    assert not cut(_row("window-1", True, 0.7), 0.5)  # made 0.7 of its 0.8
    assert cut.lost == pytest.approx(0.4)
    assert cut(_row("warmup-0", True, 1.0), 2.0)  # window-0 is overdue: its 0.9 is gone
    assert cut.bound == pytest.approx(1.0 - 1.3 / 2)
    # Ceilings alone can put a point below the best: it stops before it runs.
    assert _Cutoff(deadlines, best=0.9, ceilings={"window-0": 0.8, "window-1": 0.8}).stopped


def test_a_point_whose_answers_cannot_reach_the_best_is_not_replayed(monkeypatch):
    """At a light load every answer is on time, and a point pinned where the quality is
    lower than the best replayed so far cannot win: it scores its quality ceiling as a
    bound without a replay, and the replays it does run score as before."""
    replay, setting = tp1_dilaserve_replay()
    arrivals = [WindowArrival(0.5 * i, 50, 64, 5.0, 0, 0.0) for i in range(40)]
    layout = static_layout(setting.cluster, 1)
    high, low = OperatingPoint.static(0.9), OperatingPoint.static(0.5)
    (alone,) = replay(arrivals, layout, [low])
    runs = []
    original = BaseSimulator.run
    monkeypatch.setattr(BaseSimulator, "run", lambda self, *a, **k: runs.append(1) or original(self, *a, **k))
    best, bound = replay(arrivals, layout, [high, low])
    assert len(runs) == 1 and alone < best  # the low point was never run
    assert isinstance(bound, Bound) and bound == pytest.approx(replay.quality.ceiling([0.5]))
    assert alone <= bound < best


def test_a_quality_ceiling_bounds_every_estimate_at_those_thresholds():
    table = quality()
    top = table.ceiling([0.5, 0.7])
    for used in ([0.5], [0.7], [0.5, 0.7, 0.7], [0.7, 0.5, 0.5, 0.5]):
        assert table.estimate(used) <= top + 1e-12
    assert table.ceiling([0.7]) == pytest.approx(table.estimate([0.7]))


def test_a_replay_under_a_floor_stops_once_it_cannot_reach_it():
    """A plan's check needs to know only whether a layout reaches a goodput: below that
    floor a replay stops and scores a bound (still below the floor); above it, its own
    goodput."""
    replay, setting = tp1_dilaserve_replay()
    arrivals = [WindowArrival(0.02 * i, 200, 256, 0.6, 0, 0.0) for i in range(300)]
    layout = static_layout(setting.cluster, 1)
    fast, slow = OperatingPoint.static(0.5), OperatingPoint.static(0.9)
    (best,) = replay(arrivals, layout, [fast])
    (alone,) = replay(arrivals, layout, [slow])
    (bound,) = replay(arrivals, layout, [slow], floor=best)
    assert alone <= bound < best and alone < bound  # stopped before its end
    assert isinstance(bound, Bound) and not isinstance(alone, Bound)
    assert replay(arrivals, layout, [fast], floor=alone) == [best]


_NOW = layout_from_node_counts(CLUSTER, [{1: 4}] * 4)
_PLAN = layout_from_node_counts(CLUSTER, [{1: 4}] * 3 + [{4: 1}])  # rebuilds node 3: kept alone while it moves


@settings(max_examples=300, deadline=None)
@given(
    scores=st.lists(st.floats(0.0, 1.0) | st.sampled_from([0.0, 0.25, 0.75, 1.0]), min_size=5, max_size=5),
    share=st.sampled_from([0.0, 0.3, 1.0]) | st.floats(0.0, 1.0),
    min_gain=st.sampled_from([0.0, 0.005]),
    peak=st.booleans(),
)
def test_a_plans_verdict_with_floors_is_the_verdict_of_the_full_replays(scores, share, min_gain, peak):
    """Each replay of a plan's check past the first may stop below its floor; whatever a
    stopped replay scores there (its bound), the check applies the plan exactly where the
    full replays would."""
    window, at_peak = ARRIVALS[:200], None

    def truth(arrivals, layout) -> float:
        which = 1 if any(s.tp == 4 for s in layout) else 0 if len(layout) == len(_NOW) else 2  # now, plan, kept
        return scores[which if arrivals[0].arrival == window[0].arrival else 3 + min(which, 1)]

    def full(arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()):
        return [truth(arrivals, layout)]

    def stopping(arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()):
        score = truth(arrivals, layout)
        # A real replay stops only once it is short of the floor by more than rounding.
        return [score if floor is None or score >= floor - 1e-9 else (score + floor - 1e-9) / 2]

    if peak:
        at_peak = 10 * len(window) / (window[-1].arrival - window[0].arrival)
    job = LayoutJob(
        tuple(window), tuple(_NOW), tuple(_PLAN), OperatingPoint.static(0.9), share, min_gain, False, at_peak
    )
    assert job.run(stopping).pays == job.run(full).pays
    assert job.run(stopping).before == pytest.approx(job.run(full).before)


def test_a_run_given_up_stops_at_once():
    dyn = varied_dynamics()
    table = ReplayTable(dyn)
    setting = small_setting(dyn, tp_degrees=(1,))
    wl = Workload("w", [WorkloadRequest(f"r{i}", 0.05 * i, 100, 128) for i in range(60)])
    sim = BaseSimulator(setting, ReplayProgress(table, quality()), predictors(table), SimConfig())
    seen = []
    res = sim.run("fixed@0.9", wl, 5.0, give_up=lambda row, now: seen.append(row[0]) or len(seen) >= 10)
    full = sim.run("fixed@0.9", wl, 5.0)
    assert len(seen) == 10 and res.sim_s < full.sim_s and full.requests.height == 60
    assert res.requests.filter(res.requests["status"] != "unfinished").height == 10
