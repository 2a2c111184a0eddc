"""SimBackend and the simulator on scenarios small enough to work out by hand."""

import pytest

from dilaserve.cluster.base import InstanceReady, InstanceSpec, StepAssignment, StepFinished
from dilaserve.predict.replay import ReplayTable
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.sim.backend import SimBackend, SimBackendConfig, batch_step_latency
from dilaserve.sim.loop import EventLoop
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.setting import ClusterSetting, with_dynamics
from dilaserve.sim.simulator import SimConfig, Simulator
from dilaserve.sim.workload import WorkloadRequest, build_workload
from tests.sim.builders import dynamics, linear_profile, quality

# LP_recompute(n) = 0.1 + 0.001 n, LP_cache(n) = 0.05 + 0.001 n on TP-1.
PROFILE = linear_profile({1: 1e-3}, base=0.1, cache_base=0.05)


def simulator(tokens_per_step: int, gpus: int = 2) -> tuple[Simulator, ReplayTable]:
    dyn = dynamics({t: [tokens_per_step] for t in (0.5, 0.9)})
    table = ReplayTable(dyn)
    setting = with_dynamics(
        ClusterSetting("hand", PROFILE, ClusterConfig(nodes=1, gpus_per_node=gpus, tp_degrees=(1,))), dyn
    )
    return Simulator(setting, ReplayProgress(table, quality()), config=SimConfig()), table


def test_two_instances_three_requests_by_hand():
    # Every step commits a whole 32-token block, so each request (68 + 32 = 100 tokens) needs
    # one recompute step of LP(100) = 0.2 s. r0 -> inst 0, r1 -> inst 1 (least tokens), both
    # done at 0.2. r2 arrives at 0.05; both instances hold 100 tokens, so it joins inst 0
    # (first of the tie), waits for r0's step, runs alone 0.2 -> 0.4: latency 0.35 > SLO 0.3.
    sim, _ = simulator(32)
    wl = build_workload("w", [0.0, 0.0, 0.05], [68, 68, 68], [32, 32, 32])
    res = sim.run("infaas", wl, slo_s=0.3)
    lat = dict(zip(res.requests["request_id"], res.requests["latency_s"]))
    assert lat == pytest.approx({"w-000000": 0.2, "w-000001": 0.2, "w-000002": 0.35})
    assert res.summary.slo_attainment == pytest.approx(2 / 3)
    assert res.requests["steps"].to_list() == [1, 1, 1]
    assert res.sim_s == pytest.approx(0.4) and res.migrations == 0


def test_recompute_then_cache_steps_by_hand():
    # 16 tokens per step: each 32-token block takes a recompute step over the whole request
    # (LP_rec(36 + 64) = 0.2 s) then a cache step over the block (LP_cache(32) = 0.082 s).
    sim, _ = simulator(16, gpus=1)
    wl = build_workload("w", [1.0], [36], [64])
    res = sim.run("infaas", wl, slo_s=10.0)
    assert res.requests["latency_s"][0] == pytest.approx(2 * 0.2 + 2 * 0.082)
    assert res.requests["steps"][0] == 4
    assert res.requests["mean_threshold"][0] == pytest.approx(0.9)


def test_batch_latency_charges_both_passes_of_a_mixed_batch():
    sim, table = simulator(16)
    progress = sim.progress
    a = progress.new_state(WorkloadRequest("a", 0.0, 36, 64), 32)
    b = progress.new_state(WorkloadRequest("b", 0.0, 136, 64), 32)
    b.block_cached = True  # b's next step is a cache step
    batch = [StepAssignment(a, 0.9), StepAssignment(b, 0.9)]
    assert batch_step_latency(PROFILE, 1, batch) == pytest.approx((0.1 + 0.1) + (0.05 + 0.032))


class Sink(list):
    def __call__(self, ev):
        self.append(ev)


def _backend(tokens_per_step: int, config: SimBackendConfig = SimBackendConfig()):
    """A simulated backend on its own event loop, bound to a recording sink."""
    loop = EventLoop()
    sim, _ = simulator(tokens_per_step)
    be = SimBackend(loop, PROFILE, sim.progress, config)
    sink = Sink()
    be.bind(sink)
    return loop, sim, be, sink


def test_launch_time_and_migration_transfer_delay_events():
    loop, sim, be, sink = _backend(32, SimBackendConfig(launch_time_s=5.0, migration_time_s=0.5))
    be.launch_instance(InstanceSpec("i", 1, 0, (0,), 1000))
    loop.run()
    assert sink == [InstanceReady(5.0, "i")]
    state = sim.progress.new_state(WorkloadRequest("r", 0.0, 68, 32), 32)
    be.migrate(state, "elsewhere", "i")
    be.submit_step("i", [StepAssignment(state, 0.9)])
    loop.run()
    assert isinstance(sink[-1], StepFinished) and sink[-1].time == pytest.approx(5.0 + 0.5 + 0.2)
    assert state.finished


def test_backend_refuses_what_the_scheduler_must_never_ask():
    loop = EventLoop()
    sim, _ = simulator(32)
    be = SimBackend(loop, PROFILE, sim.progress)
    be.bind(Sink())
    spec = InstanceSpec("i", 1, 0, (0,), 1000)
    be.launch_instance(spec)
    with pytest.raises(RuntimeError, match="not ready"):
        be.submit_step("i", [])
    with pytest.raises(RuntimeError, match="still held by i"):
        be.launch_instance(InstanceSpec("j", 1, 0, (0,), 1000))
    with pytest.raises(ValueError, match=">= 0"):
        SimBackendConfig(launch_time_s=-1)


def test_a_request_whose_cache_is_elsewhere_rebuilds_it_on_its_next_step():
    # 8 tokens a step: after its first (recompute) step a request's next three are cache
    # steps, LP_cache(32) = 0.082 s, where its K/V are; elsewhere it is LP_rec(100) = 0.2 s.
    loop, sim, be, sink = _backend(8, SimBackendConfig(launch_time_s=0.0, migration_time_s=0.0))
    for iid, gpu in (("i", 0), ("j", 1)):
        be.launch_instance(InstanceSpec(iid, 1, 0, (gpu,), 1000))
    loop.run()
    moved, stays = (sim.progress.new_state(WorkloadRequest(r, 0.0, 36, 64), 32) for r in ("moved", "stays"))
    for st in (moved, stays):
        be.submit_step("i", [StepAssignment(st, 0.9)])
        loop.run()
        assert st.next_kind.value == "cache"
    be.migrate(moved, "i", "j")  # marked at once: the control plane prices the rebuild
    assert moved.next_kind.value == "recompute"
    be.submit_step("i", [StepAssignment(stays, 0.9)])
    loop.run()
    assert sink[-1].duration_s == pytest.approx(0.082)  # its cache is where it runs
    # stays's K/V die with i; its state still says cached, but j has no K/V for it
    be.fail_instance("i")
    assert stays.next_kind.value == "cache"
    be.submit_step("j", [StepAssignment(stays, 0.9)])
    loop.run()
    assert sink[-1].duration_s == pytest.approx(0.2) and stays.recompute_steps_done == 2
