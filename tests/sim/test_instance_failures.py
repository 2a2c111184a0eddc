"""A simulated instance killed mid-run: the control plane re-queues its requests and replaces it."""

import logging

import polars as pl
import pytest

from dilaserve.cluster.base import InstanceFailed, InstanceReady, InstanceSpec, StepAssignment, StepFinished
from dilaserve.predict.replay import ReplayTable
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.sim.backend import SimBackend, SimBackendConfig
from dilaserve.sim.loop import EventLoop
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.setting import ClusterSetting, with_dynamics
from dilaserve.sim.simulator import SimConfig, Simulator
from dilaserve.sim.workload import WorkloadRequest, build_workload
from tests.sim.builders import dynamics, linear_profile, quality

# LP_recompute(n) = 0.1 + 0.001 n, LP_cache(n) = 0.05 + 0.001 n on TP-1.
PROFILE = linear_profile({1: 1e-3}, base=0.1, cache_base=0.05)


def _simulator(failures=()) -> Simulator:
    # 16 tokens a step: a 64-token answer takes 4 steps (recompute, cache, recompute, cache).
    dyn = dynamics({t: [16] for t in (0.5, 0.9)})
    setting = with_dynamics(
        ClusterSetting("hand", PROFILE, ClusterConfig(nodes=1, gpus_per_node=2, tp_degrees=(1,))), dyn
    )
    config = SimConfig(backend=SimBackendConfig(launch_time_s=1.0, failures=failures))
    return Simulator(setting, ReplayProgress(ReplayTable(dyn), quality()), config=config)


def test_an_instance_killed_mid_run_loses_no_request_and_is_replaced():
    # Six requests at 0 split three and three over inst-0-0 and inst-0-1; inst-0-0's first
    # step (LP(300) = 0.4 s) is in flight when it dies at 0.3. Two more arrive at 2.0 s,
    # after the replacement has started (1 s launch).
    wl = build_workload("w", [0.0] * 6 + [2.0] * 2, [36] * 8, [64] * 8)
    healthy = _simulator().run("infaas", wl, slo_s=30.0)
    res = _simulator(failures=((0.3, "inst-0-0"),)).run("infaas", wl, slo_s=30.0)
    r = res.requests
    assert r.height == len(wl) and r["request_id"].n_unique() == len(wl)  # none lost, none twice
    assert (r["status"] == "finished").all()
    # The lost step was never applied: every request took its four steps, no more, no fewer.
    assert r["steps"].to_list() == [4] * len(wl)
    assert res.failures == ((0.3, "inst-0-0", "inst-0-0~1"),)
    assert res.reconfig_launches == 0  # a replacement is not a reconfiguration
    mix = {round(t, 9): n for t, n in zip(res.tp_series["time_s"], res.tp_series["instances"])}
    assert mix[0.3] == 1 and mix[1.3] == 2  # down to one at the kill, back to two a launch later
    # The three requests of the dead instance waited for the other one: the kill cost time.
    slower = r.join(healthy.requests, on="request_id", suffix="_healthy").filter(
        pl.col("latency_s") > pl.col("latency_s_healthy") + 1e-9
    )
    assert slower.height >= 3


class Sink(list):
    def __call__(self, ev):
        self.append(ev)


def test_fail_instance_loses_the_step_in_flight_and_frees_the_gpus():
    loop = EventLoop()
    progress = _simulator().progress
    be = SimBackend(loop, PROFILE, progress, SimBackendConfig(launch_time_s=0.0))
    sink = Sink()
    be.bind(sink)
    spec = InstanceSpec("i", 1, 0, (0,), 1000)
    be.launch_instance(spec)
    loop.run()
    state = progress.new_state(WorkloadRequest("r", 0.0, 68, 32), 32)
    be.submit_step("i", [StepAssignment(state, 0.9)])  # 0.2 s
    loop.at(0.1, lambda: be.fail_instance("i", "test kill"))
    loop.run()
    assert sink == [InstanceReady(0.0, "i"), InstanceFailed(0.1, spec, "test kill")]
    assert state.steps_done == 0 and not any(isinstance(e, StepFinished) for e in sink)
    be.launch_instance(InstanceSpec("j", 1, 0, (0,), 1000))  # its GPU is free again
    with pytest.raises(ValueError, match="no such instance is running; running: \\['j'\\]"):
        be.fail_instance("i")


def test_a_scheduled_failure_of_an_instance_not_running_is_skipped_with_a_warning(caplog):
    wl = build_workload("w", [0.0, 0.0], [36, 36], [64, 64])
    with caplog.at_level(logging.WARNING):
        res = _simulator(failures=((0.1, "inst-9-9"),)).run("infaas", wl, slo_s=30.0)
    assert "no instance inst-9-9 is running at 0.100s" in caplog.text
    assert res.failures == () and (res.requests["status"] == "finished").all()


@pytest.mark.parametrize("failures", [((-1.0, "inst-0-0"),), ((1.0,),), (("inst-0-0", 1.0),), ((1.0, ""),)])
def test_failure_times_are_validated_with_the_shape_to_give(failures):
    with pytest.raises(ValueError, match=r"give \(seconds >= 0, instance id\) pairs, e.g. failures="):
        SimBackendConfig(failures=failures)
