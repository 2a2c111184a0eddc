"""A reconfiguration tick on a scheduler: where a tier is out of the starting layout's reach,
the plan is made ahead and judged by the tuner's replay at its hold and forecast; where no
tier is, the tick proposes as before."""

import pytest

from dilaserve.cluster.base import InstanceSpec
from dilaserve.reconfig.config import ClusterConfig, ReconfigConfig
from dilaserve.reconfig.forecast import fastest_alone_s
from dilaserve.reconfig.monitor import RequestClass
from dilaserve.schedule.events import ReconfigTick
from dilaserve.schedule.tuner import TunerConfig
from tests.builders.schedule import arrive, cluster
from tests.control.builders import make_request

PROMPT, GEN = 36, 64


def _scheduler(judged: list, tuner_interval_s: float = 1000.0):
    """One node of four TP-1 instances that may become a TP-4, with a tuner (every
    ``tuner_interval_s``) whose replay favours a layout with a TP-4 (and records the
    layouts it was asked about)."""

    def replay(arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()):
        judged.append(sorted(s.tp for s in layout))
        return [0.9 if any(s.tp == 4 for s in layout) else 0.5 for _ in points]

    sched, _ = cluster(
        "dilaserve",
        specs=[InstanceSpec(f"t{g}", 1, 0, (g,), 4096) for g in range(4)],
        cluster=ClusterConfig(nodes=1, gpus_per_node=4, tp_degrees=(1, 4)),
        reconfig=ReconfigConfig(),
        evaluator=replay,
        tuner=TunerConfig(interval_s=tuner_interval_s, window_s=60.0, sample=1.0, min_arrivals=5),
    )
    return sched


def _tight_slo(sched) -> float:
    """An SLO between the fastest a request runs alone on TP-4 and on TP-1, at the lowest
    threshold the controller may run."""
    rec, lowest = sched.reconfigurator, sched._lowest_threshold()
    pb = rec.problem([RequestClass((0, 0), 1.0, float(PROMPT), float(GEN), 1e9)])
    tp1, tp4 = (float(fastest_alone_s(pb, d, lowest)[0]) for d in (1, 4))
    assert tp4 < tp1
    return (tp1 + tp4) / 2


def _arrivals(sched, tight: bool, n: int = 30) -> None:
    """``n`` requests at 1 request/s, a third of them interactive (out of TP-1's reach when
    ``tight``)."""
    slo_tight = _tight_slo(sched) if tight else 50.0
    for k in range(n):
        t = float(k)
        interactive = k % 3 == 0
        req = make_request(
            f"r{k}", PROMPT, GEN, arrival=t, slo=slo_tight if interactive else 50.0, priority=int(interactive)
        )
        arrive(sched, req, t=t)


@pytest.mark.parametrize("tight", [True, False])
def test_tick_plans_ahead_only_for_a_tier_out_of_reach(tight):
    judged: list = []
    sched = _scheduler(judged)
    _arrivals(sched, tight)
    sched.handle(ReconfigTick(30.0))
    plan = sched.executor.plan if sched.executor is not None else None
    if tight:
        assert plan is not None and plan.reason.startswith("ahead")
        assert any(st.launch.tp == 4 for st in plan.steps)
        assert plan.hold_s is not None and plan.peak_rps == pytest.approx(1.0, rel=0.3)
        assert [4] in judged or [1, 1, 1, 1] in judged  # the replay judged the move
    else:
        assert plan is None or not plan.reason.startswith("ahead")


@pytest.mark.parametrize("tight", [True, False])
def test_a_tuning_plans_ahead_at_once_where_a_tier_is_out_of_reach(tight):
    """Where a tier is out of the starting layout's reach, the plan made ahead follows each
    tuning, not only the tick (none comes in this run): the layout follows a quiet phase as
    soon as the tuner's window shows it. Where none is, a tuning leaves planning to the tick."""
    judged: list = []
    sched = _scheduler(judged, tuner_interval_s=20.0)
    _arrivals(sched, tight)
    assert sched.tuner.records  # the tuner ran, at 20 s
    plan = sched.executor.plan if sched.executor is not None else None
    if tight:
        assert plan is not None and plan.reason.startswith("ahead")
        assert any(st.launch.tp == 4 for st in plan.steps)
    else:
        assert plan is None
        assert [4] not in judged  # no layout was replayed: the tick alone plans here


@pytest.mark.parametrize("burst", [False, True])
def test_the_way_home_from_a_layout_made_ahead_waits_for_the_load_to_outgrow_it(burst):
    """On the fast layout made ahead for a tier out of reach, the way home is for throughput:
    a window that merely replays better at home (a quiet phase's own bursts) keeps the
    cluster where it is, and a rise of the arrival rate sends it home at once."""
    judged: list = []

    def replay(arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()):
        judged.append(sorted(s.tp for s in layout))
        return [0.9 if all(s.tp == 1 for s in layout) else 0.5 for _ in points]

    sched, _ = cluster(
        "dilaserve",
        specs=[InstanceSpec("fast", 4, 0, (0, 1, 2, 3), 4096)],
        cluster=ClusterConfig(nodes=1, gpus_per_node=4, tp_degrees=(1, 4)),
        reconfig=ReconfigConfig(),
        evaluator=replay,
        tuner=TunerConfig(interval_s=20.0, window_s=60.0, sample=1.0, min_arrivals=5),
    )
    sched._home = [InstanceSpec(f"t{g}", 1, 0, (g,), 4096) for g in range(4)]  # it started on TP-1
    _arrivals(sched, tight=True)  # 1 request/s; the tuner tunes at 20 s
    assert sched.tuner.records and sched.reconfigurator.needs_reach(30.0, sched._home)
    assert sched.executor is None and [1, 1, 1, 1] not in judged
    if burst:
        slo = _tight_slo(sched)
        for k in range(20):  # twenty arrivals within a second: a rise
            t = 30.0 + 0.05 * k
            arrive(sched, make_request(f"b{k}", PROMPT, GEN, arrival=t, slo=slo, priority=1), t=t)
        assert sched.tuner.last_rose
        assert sched.executor is not None and sched.executor.plan.reason.startswith("back to the starting layout")
        assert [1, 1, 1, 1] in judged
    else:
        assert not sched.tuner.last_rose


def test_the_way_home_at_a_rise_rebuilds_one_node_at_a_time():
    """The way home at a rise is for throughput: the fast nodes not yet rebuilt keep serving,
    even where the offline budget would take them all at once."""

    def replay(arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()):
        return [0.9 if all(s.tp == 1 for s in layout) else 0.5 for _ in points]

    sched, _ = cluster(
        "dilaserve",
        specs=[InstanceSpec(f"fast{n}", 4, n, (0, 1, 2, 3), 4096) for n in range(2)],
        cluster=ClusterConfig(nodes=2, gpus_per_node=4, tp_degrees=(1, 4)),
        reconfig=ReconfigConfig(max_offline_share=1.0),
        evaluator=replay,
        tuner=TunerConfig(interval_s=20.0, window_s=60.0, sample=1.0, min_arrivals=5),
    )
    sched._home = [InstanceSpec(f"t{n}-{g}", 1, n, (g,), 4096) for n in range(2) for g in range(4)]
    _arrivals(sched, tight=True)
    assert sched.executor is None and sched.reconfigurator.offline_gpus() == 8
    slo = _tight_slo(sched)
    for k in range(20):  # twenty arrivals within a second: a rise
        t = 30.0 + 0.05 * k
        arrive(sched, make_request(f"b{k}", PROMPT, GEN, arrival=t, slo=slo, priority=1), t=t)
    assert sched.tuner.last_rose and sched.executor is not None
    assert sched.executor.plan.reason.startswith("back to the starting layout")
    assert sched.executor.max_offline_gpus == 4  # one node's GPUs, not the budget's eight
    pool = sched.pool
    draining = [pool.ids[s] for s in range(len(pool.ids)) if pool.draining[s]]
    assert len(draining) == 1 and draining[0].startswith("fast")
