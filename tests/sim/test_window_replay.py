"""The tuner's replay on the simulator, and the static layouts it and the frontier run on."""

from __future__ import annotations

import math
from collections import Counter

import polars as pl

from dilaserve.control.operating_point import OperatingPoint
from dilaserve.control.predictions import StepCalibration
from dilaserve.engine.state import StepKind
from dilaserve.predict.replay import ReplayTable
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.reconfig.plan import layout_from_node_counts, static_layout
from dilaserve.schedule.policies import get_policy
from dilaserve.schedule.tuner import TunerConfig, WindowArrival
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.run import BaseSimulator
from dilaserve.sim.simulator import SimConfig
from dilaserve.sim.window_replay import WindowReplay, layout_slice
from dilaserve.sim.workload import Workload, WorkloadRequest
from tests.sim.builders import predictors, quality, small_setting, tp1_dilaserve_replay, varied_dynamics


def test_layouts_from_node_counts_pack_aligned_groups():
    cluster = ClusterConfig(nodes=2, gpus_per_node=4)
    layout = layout_from_node_counts(cluster, [{1: 2, 2: 1}, {4: 1}])
    assert [(s.node, s.tp, s.gpus) for s in layout] == [
        (0, 2, (0, 1)),
        (0, 1, (2,)),
        (0, 1, (3,)),
        (1, 4, (0, 1, 2, 3)),
    ]


def test_a_slice_keeps_the_tp_mix():
    cluster = ClusterConfig(nodes=4, gpus_per_node=4)
    layout = layout_from_node_counts(cluster, [{1: 4}, {1: 4}, {2: 2}, {2: 2}])
    part = layout_slice(layout, 0.25)
    assert Counter(s.tp for s in part) == {1: 2, 2: 1}
    assert len(layout_slice(layout, 0.01)) == 1


def test_the_replay_ranks_a_slow_point_below_a_fast_one_under_overload():
    """On a window that overloads the cluster at 0.9, pinning 0.5 (more tokens per step)
    serves more requests on time; every candidate replays the same sampled requests."""
    dyn = varied_dynamics()
    table = ReplayTable(dyn)
    setting = small_setting(dyn, tp_degrees=(1,))
    progress = ReplayProgress(table, quality())
    replay = WindowReplay(setting, progress, predictors(table), SimConfig(), get_policy("dilaserve"))
    arrivals = [WindowArrival(0.02 * i, 200, 256, 0.6, 0, 0.0) for i in range(300)]
    layout = static_layout(setting.cluster, 1)
    fast, slow, adaptive = replay(
        arrivals, layout, [OperatingPoint.static(0.5), OperatingPoint.static(0.9), OperatingPoint.adaptive()]
    )
    assert fast > slow
    assert 0.0 <= min(fast, slow, adaptive) and max(fast, slow, adaptive) <= 1.0
    assert replay(arrivals, layout, [OperatingPoint.static(0.5)]) != [] and replay.calls == 2


def test_a_replay_keeps_the_clients_quality_floors():
    """A server's clients may ask for a quality floor (``min_threshold``): the live cluster
    runs those requests at or above it whatever the point pins, and so does the replay, so a
    low pin is not credited with answers its floors forbid. Below the floors a pin holds."""
    replay, setting = tp1_dilaserve_replay()
    layout = static_layout(setting.cluster, 1)
    low, high = OperatingPoint.static(0.5), OperatingPoint.static(0.9)
    light = [WindowArrival(0.5 * i, 50, 64, 5.0, 0, 0.0) for i in range(40)]  # every answer on time
    floored = [WindowArrival(a.arrival, 50, 64, 5.0, 0, 0.9) for a in light]
    (free,) = replay(light, layout, [low])
    (at_high,) = replay(light, layout, [high])
    assert free < at_high  # 0.5's answers are worse
    assert replay(floored, layout, [low]) == [at_high]  # the floor runs them at 0.9
    # The floor lifts the low pin's quality ceiling too: it is replayed, and ties the high pin.
    assert replay(floored, layout, [high, low]) == [at_high, at_high]


def test_a_replay_on_a_slower_learned_machine_keeps_fewer_slos():
    """The replay steps, and its control plane prices, as much slower than the profile as
    the live control plane has learned: a window the profiled machine serves on time
    misses SLOs on a machine that steps four times slower, and factors of 1 change nothing."""
    replay, setting = tp1_dilaserve_replay()
    layout = static_layout(setting.cluster, 1)
    arrivals = [WindowArrival(0.05 * i, 200, 256, 1.0, 0, 0.0) for i in range(200)]
    point = [OperatingPoint.static(0.9)]
    (profiled,) = replay(arrivals, layout, point, sample=1.0)
    slow = tuple(((1, kind), 4.0) for kind in StepKind)
    (learned,) = replay(arrivals, layout, point, sample=1.0, step_factors=slow)
    assert learned < profiled - 0.1
    same = tuple(((1, kind), 1.0) for kind in StepKind)
    assert replay(arrivals, layout, point, sample=1.0, step_factors=same) == [profiled]


def test_the_sample_depends_on_the_window_not_on_the_replays_before_it():
    """A plan checked between two tunings (one more replay) must not change what the next
    tuning replays: the same window draws the same sample whatever ran before it."""
    dyn = varied_dynamics()
    table = ReplayTable(dyn)
    setting = small_setting(dyn, tp_degrees=(1,))

    def fresh():
        return WindowReplay(
            setting, ReplayProgress(table, quality()), predictors(table), SimConfig(), get_policy("dilaserve")
        )

    arrivals = [
        WindowArrival(0.01 * i, 50 + 7 * (i % 13), 64 + 32 * (i % 7), 0.4 + 0.1 * (i % 5), 0, 0.0) for i in range(200)
    ]
    layout = static_layout(setting.cluster, 1)
    points = [OperatingPoint.static(0.7), OperatingPoint.static(0.9)]
    busy = fresh()
    busy(arrivals[:50], layout, points)  # an unrelated replay first
    assert busy(arrivals, layout, points, sample=0.5) == fresh()(arrivals, layout, points, sample=0.5)
    other = [WindowArrival(a.arrival + 1.0, *list(a.__dict__.values())[1:]) for a in arrivals]
    assert fresh()(other, layout, points, sample=0.5) != fresh()(arrivals, layout, points, sample=0.5)


def test_a_warm_replay_starts_loaded_and_scores_the_second_copy_alone():
    """An overloaded window replayed from an empty cluster flatters it: its queue has no
    time to build. Warm, the same window runs twice and the second copy, scored alone,
    starts behind the first's queue, as the live cluster does."""
    replay, setting = tp1_dilaserve_replay()
    arrivals = [WindowArrival(0.05 * i, 200, 256, 2.0, 0, 0.0) for i in range(100)]
    layout = static_layout(setting.cluster, 1)
    point = [OperatingPoint.static(0.9).with_admit(False)]
    (cold,) = replay(arrivals, layout, point, sample=1.0)
    (warm,) = replay(arrivals, layout, point, sample=1.0, warm=True)
    assert 0.0 <= warm < cold
    light = arrivals[::4]  # one every 0.2 s: no queue either way
    (cold_light,) = replay(light, layout, point, sample=1.0)
    (warm_light,) = replay(light, layout, point, sample=1.0, warm=True)
    assert warm_light == cold_light


def test_a_compressed_sample_replays_the_whole_cluster_as_the_full_window_does():
    """A quarter of the instances under a quarter of the arrivals pools its load over one
    instance of four: near saturation it queues where the cluster does not. The same
    quarter of the arrivals compressed in time onto the whole cluster (``compress``)
    replays what the full window replays far more closely, at the same number of requests."""
    dyn = varied_dynamics()
    table = ReplayTable(dyn)
    setting = small_setting(dyn, tp_degrees=(1,))
    layout = static_layout(setting.cluster, 1)
    assert len(layout) == 4

    def replay(compress: bool, sample: float) -> list[float]:
        config = SimConfig(tuner=TunerConfig(compress=compress))
        run = WindowReplay(
            setting, ReplayProgress(table, quality()), predictors(table), config, get_policy("dilaserve")
        )
        arrivals = [WindowArrival(0.02 * i, 50 + 7 * (i % 13), 64 + 32 * (i % 7), 0.6, 0, 0.0) for i in range(800)]
        return run(arrivals, layout, [OperatingPoint.static(0.9), OperatingPoint.static(0.5)], sample=sample)

    full, sliced, compressed = replay(False, 1.0), replay(False, 0.25), replay(True, 0.25)
    assert replay(True, 1.0) == full  # the whole window is never compressed
    for f, s, c in zip(full, sliced, compressed):
        assert s < f - 0.03  # the slice queues where the cluster does not
        assert abs(c - f) < 0.01


def test_a_replay_predicts_with_the_live_calibration_it_is_handed():
    """A replay's control plane starts from the calibration the tuner hands it (the live
    one's). Told that answers take four times their predicted steps, its admission refuses
    requests the uncalibrated replay took; a calibration that learned nothing replays as none."""
    dyn = varied_dynamics()
    table = ReplayTable(dyn)
    setting = small_setting(dyn, tp_degrees=(1,))
    arrivals = [WindowArrival(0.05 * i, 200, 256, 1.5, 0, 0.0) for i in range(120)]
    wl = Workload("w", [WorkloadRequest(f"r{i}", a.arrival, 200, 256, slo_s=a.slo_s) for i, a in enumerate(arrivals)])

    def refused(calibration):
        sim = BaseSimulator(setting, ReplayProgress(table, quality()), predictors(table), SimConfig())
        res = sim.run(get_policy("dilaserve"), wl, 1.5, calibration=calibration)
        return res.requests.filter(pl.col("status") != "finished").height, res.summary.goodput

    none = refused(None)
    assert refused(StepCalibration()) == none
    slow = refused(StepCalibration(math.log(4.0)))
    assert slow[0] > none[0]
    replay = WindowReplay(
        setting, ReplayProgress(table, quality()), predictors(table), SimConfig(), get_policy("dilaserve")
    )
    point = [OperatingPoint.static(0.7)]
    layout = static_layout(setting.cluster, 1)
    plain = replay(arrivals, layout, point, sample=1.0)
    assert replay(arrivals, layout, point, sample=1.0, calibration=StepCalibration(math.log(4.0))) != plain
