"""The step law and the capacity model that prices blocks with it."""

import pytest

from dilaserve.control.cost_model import CapacityModel
from dilaserve.control.step_law import StepLaw
from dilaserve.predict.replay import ReplayTable
from dilaserve.profile.types import LatencyProfile, StepCurve
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.sim.setting import ClusterSetting, with_dynamics
from tests.sim.builders import dynamics, linear_profile


def test_step_law_from_tokens_per_step_interpolates_and_clips():
    law = StepLaw.from_tokens_per_step({0.5: 8.0, 0.9: 4.0, 1.0: 0.5}, 32)
    assert law.steps(0.5) == 4.0 and law.steps(0.9) == 8.0
    assert law.steps(0.7) == pytest.approx(6.0)  # linear between recorded thresholds
    assert law.steps(1.0) == 32.0  # at most one step per token
    assert law.steps(0.1) == 4.0  # the end value outside the table
    assert law.tokens_per_step(0.9) == 4.0 and law.cache_steps(0.9) == 7.0
    assert law.request_steps(128, 0.9) == 32.0


def test_step_law_from_steps_per_token_is_block_length_times_it():
    law = StepLaw.from_steps_per_token({0.9: 0.25}, 32)
    assert law.steps(0.9) == 8.0


def test_step_law_from_replay_is_the_exact_expected_steps_per_block():
    dyn = dynamics({0.5: [8], 0.9: [3, 5]})
    table = ReplayTable(dyn)
    law = StepLaw.from_replay(table, 32)
    assert law.thresholds == (0.5, 0.9)
    assert law.steps(0.5) == 4.0
    assert law.steps(0.9) == pytest.approx(table.block_steps(0.9, 32)[0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(block_length=0, thresholds=(0.9,), steps_per_block=(8.0,)), "block length"),
        (dict(block_length=32, thresholds=(0.9, 0.5), steps_per_block=(8.0, 4.0)), "strictly increasing"),
        (dict(block_length=32, thresholds=(0.9,), steps_per_block=(40.0,)), "outside"),
    ],
)
def test_step_law_errors_say_how_to_fix(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StepLaw(**kwargs)


def test_capacity_prices_a_block_as_s_minus_one_cache_steps_and_one_recompute():
    # LP_recompute = LP_cache = 1 s flat; B = 32, one request of 1000 tokens.
    p = LatencyProfile("flat", {1: StepCurve((1.0,), (1.0,))}, {1: StepCurve((1.0,), (1.0,))})
    m = CapacityModel(p)
    # S = 8: work 7 x 32 + 1000 = 1224 token-steps in 7 + 1 = 8 s.
    law = StepLaw.from_tokens_per_step({0.9: 4.0}, 32)
    assert m.throughput(1, 1000, law.split(0.9, 968, 32)) == pytest.approx(1224 / 8)
    # The paper's pattern (one token per step): 31 x 32 + 1000 in 32 s.
    paper = StepLaw.one_token_per_step(32).split(0.9, 968, 32)
    assert m.throughput(1, 1000, paper) == pytest.approx((31 * 32 + 1000) / 32)


def test_with_dynamics_puts_the_step_law_in_control_and_reconfig():
    dyn = dynamics({0.5: [8], 0.9: [4]})
    cluster = ClusterConfig(nodes=1, gpus_per_node=1, tp_degrees=(1,))
    setting = with_dynamics(ClusterSetting("s", linear_profile({1: 1e-3}), cluster), dyn)
    law = setting.control.step_law
    assert law is not None and law.steps(0.9) == 8.0 and law.steps(0.5) == 4.0
    assert setting.reconfig.tokens_per_step[0.9] == 4.0 and setting.reconfig.block_length == 32
