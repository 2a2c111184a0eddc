"""The simulator in the block-diffusion family: replayed block-causal requests, their step
latency, isolated latency (the SLO's base) and the nominal capacity."""

import pytest

from dilaserve.cluster.base import StepAssignment
from dilaserve.control.cost_model import CapacityModel
from dilaserve.control.step_law import step_split
from dilaserve.engine.state import StepKind
from dilaserve.predict.replay import ReplayTable
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.sim.backend import batch_step_latency
from dilaserve.sim.capacity import nominal_capacity_rps
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.setting import ClusterSetting, with_dynamics
from dilaserve.sim.simulator import SimConfig, Simulator
from dilaserve.sim.slo import isolated_latency
from dilaserve.sim.workload import WorkloadRequest, build_workload
from tests.sim.builders import dynamics, linear_profile, quality

# LP_recompute(n) = 0.1 + 0.001 n, LP_cache(n) = 0.05 + 0.001 n on TP-1.
PROFILE = linear_profile({1: 1e-3}, base=0.1, cache_base=0.05)


def block_setting(tokens_per_step: int, block_causal: bool = True) -> tuple[ClusterSetting, ReplayTable]:
    dyn = dynamics({t: [tokens_per_step] for t in (0.5, 0.9)})
    cluster = ClusterConfig(nodes=1, gpus_per_node=1, tp_degrees=(1,))
    return with_dynamics(ClusterSetting("b", PROFILE, cluster, block_causal=block_causal), dyn), ReplayTable(dyn)


def test_replayed_block_causal_request_prefills_once_then_steps_blocks():
    _, table = block_setting(16)
    progress = ReplayProgress(table, quality(), block_causal=True)
    st = progress.new_state(WorkloadRequest("a", 0.0, 36, 96), 32)
    kinds = []
    while not st.finished:
        kinds.append(st.next_kind)
        progress.step([StepAssignment(st, 0.9)])
    # 3 blocks of 2 steps: one prefill, then cache steps only (no recompute per block)
    assert kinds == [StepKind.RECOMPUTE] + [StepKind.CACHE] * 5
    assert st.recompute_steps_done == 1 and st.steps_done == 6


def test_block_causal_step_latency_feeds_appends_and_prefills_the_context():
    _, table = block_setting(32)
    progress = ReplayProgress(table, quality(), block_causal=True)
    a = progress.new_state(WorkloadRequest("a", 0.0, 36, 96), 32)
    b = progress.new_state(WorkloadRequest("b", 0.0, 100, 96), 32)
    progress.step([StepAssignment(b, 0.9)])  # b's prefill finished its first block: append pending
    assert b.append_pending and b.next_kind is StepKind.CACHE
    batch = [StepAssignment(a, 0.9), StepAssignment(b, 0.9)]
    # a prefills prompt + first block (68 tokens); b feeds its block and the finished one (64)
    assert batch_step_latency(PROFILE, 1, batch) == pytest.approx((0.1 + 0.068) + (0.05 + 0.064))


def test_isolated_latency_of_a_block_causal_request():
    _, table = block_setting(16)
    # 3 blocks x 2 steps: the prefill over 36 + 32 tokens, 5 cache steps over 32, of which
    # 2 append a block (5 steps feed 5 x 32 + 2 x 32 = 224 tokens: 44.8 on average)
    expected = (0.1 + 0.068) + 5 * (0.05 + 0.001 * 224 / 5)
    assert isolated_latency(PROFILE, table, 36, 96, 32, 0.9, block_causal=True) == pytest.approx(expected)
    # bidirectional: one recompute step per block over the whole canvas, 3 cache steps
    bi = 3 * (0.1 + 0.132) + 3 * (0.05 + 0.032)
    assert isolated_latency(PROFILE, table, 36, 96, 32, 0.9) == pytest.approx(bi)


def test_simulated_block_causal_request_takes_its_isolated_latency():
    setting, table = block_setting(16)
    sim = Simulator(setting, ReplayProgress(table, quality(), block_causal=True), config=SimConfig())
    res = sim.run("infaas", build_workload("w", [1.0], [36], [96]), slo_s=10.0)
    expected = isolated_latency(PROFILE, table, 36, 96, 32, 0.9, block_causal=True)
    assert res.requests["latency_s"][0] == pytest.approx(expected)
    assert res.requests["steps"][0] == 6


def test_nominal_capacity_prices_requests_in_the_settings_family():
    for bc in (False, True):
        setting, table = block_setting(16, bc)
        assert setting.control.step_law.block_causal is bc and setting.reconfig.block_causal is bc
        # 3 blocks of 2 steps: the family's split of those 6 steps, the instance's throughput
        # at its best batch priced for the mean request rounded to 16 tokens (196 -> 192)
        split, mean = step_split(6, 100, 96, 32, bc), step_split(6, 96, 96, 32, bc)
        mb = setting.cluster.max_batch_tokens[1]
        expected = CapacityModel(PROFILE, setting.control.capacity_batch_grid).throughput(1, mb, mean) / split.work
        assert nominal_capacity_rps(setting, table, [100], [96], 0.9) == pytest.approx(expected)
    assert step_split(6, 100, 96, 32, True).work < step_split(6, 100, 96, 32, False).work


def test_simulator_refuses_a_replay_of_the_other_family():
    setting, table = block_setting(16)
    with pytest.raises(ValueError, match="block_causal=setting.block_causal"):
        Simulator(setting, ReplayProgress(table, quality()))
