"""The load pass runs inside a simulated run: the scheduler hands it each accepting
instance as ``(tp, max batch tokens)`` and it prices the cluster's capacity.

The tiny contexts of the other simulator tests carry no threshold-quality table, so the
price of capacity (which prices accuracy) switches itself off there and a scheduler that
called the load pass wrongly went unnoticed."""

from dilaserve.control.load_pass import LoadPass
from dilaserve.predict.replay import ReplayTable
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.setting import Predictors
from dilaserve.sim.simulator import SimConfig, Simulator
from dilaserve.sim.workload import build_workload
from tests.sim.builders import predictors, quality, small_setting, varied_dynamics


def test_an_overloaded_run_with_the_price_of_capacity_passes_each_instance_to_the_load_pass(monkeypatch):
    dyn = varied_dynamics()
    setting, table = small_setting(dyn), ReplayTable(dyn)
    base = predictors(table)
    sim = Simulator(
        setting,
        ReplayProgress(table, quality()),
        Predictors(learned=base.learned, oneshot=base.oneshot, quality=quality()),
        SimConfig(),
    )
    seen: list[tuple] = []
    real_run = LoadPass.run

    def spy(self, reqs, instances, now):
        seen.extend(instances)
        return real_run(self, reqs, instances, now)

    monkeypatch.setattr(LoadPass, "run", spy)
    n = 120
    wl = build_workload("burst", [0.01 * i for i in range(n)], [200] * n, [256] * n)
    res = sim.run("dilaserve-no-tuner", wl, slo_s=3.0)
    assert res.requests.height == n  # nothing lost
    assert seen, "the load pass never ran in an overloaded run with load control on"
    tps = {int(tp) for tp, _ in seen}
    assert all(len(inst) == 2 for inst in seen) and tps <= {1, 2, 4}
    assert all(mb == setting.cluster.max_batch_tokens[tp] for tp, mb in seen)
