"""Reconfiguration checked by the tuner's replay: a plan back to the layout the cluster
started with, once a tuning shows that layout replays better."""

import pytest

from dilaserve.cluster.base import InstanceReady, InstanceSpec, InstanceStopped
from dilaserve.reconfig.config import ClusterConfig
from tests.builders.schedule import arrive, cluster
from tests.control.builders import make_request


def _moved_to_tp2(evaluator):
    """A two-GPU cluster started as two TP-1 instances, moved by a plan to one TP-2, with a
    tuner whose replay is ``evaluator``."""
    from dilaserve.reconfig.config import ReconfigConfig
    from dilaserve.schedule.tuner import TunerConfig

    t1 = [InstanceSpec("t0", 1, 0, (0,), 4096), InstanceSpec("t1", 1, 0, (1,), 4096)]
    sched, be = cluster(
        "dilaserve",
        specs=t1,
        cluster=ClusterConfig(nodes=1, gpus_per_node=2, tp_degrees=(1, 2)),
        reconfig=ReconfigConfig(),
        evaluator=evaluator,
        tuner=TunerConfig(interval_s=5.0, window_s=5.0, sample=1.0, min_arrivals=5),
    )
    plan = sched.reconfigurator.plan_to([{2: 1}], sched.pool.active_specs())
    assert sched.apply_plan(plan)
    for i in ("t0", "t1"):
        sched.handle(InstanceStopped(0.1, i))
    sched.handle(InstanceReady(0.2, plan.steps[0].launch.instance_id))
    assert sched.executor.done and [s.tp for s in sched.pool.active_specs()] == [2]
    return sched


@pytest.mark.parametrize("home_replays_better", [True, False])
def test_after_a_tuning_the_cluster_goes_back_to_its_starting_layout_where_that_replays_better(
    home_replays_better,
):
    def replay(arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()):
        tp1 = any(s.tp == 1 for s in layout)
        return [(0.9 if tp1 == home_replays_better else 0.5) for _ in points]

    sched = _moved_to_tp2(replay)
    for k in range(12):  # a tuning falls due 5 s after the first arrival
        arrive(sched, make_request(f"r{k}", slo=30.0, arrival=0.5 * k), t=0.5 + 0.5 * k)
    assert sched.tuner.records, "a tuning ran"
    going_home = sched.executor is not None and not sched.executor.done
    assert going_home == home_replays_better
    if going_home:
        plan = sched.executor.plan
        assert plan.reason.startswith("back to the starting layout") and sorted(s.launch.tp for s in plan.steps) == [
            1,
            1,
        ]
