"""The cost formulas in the block-diffusion family: one prefill per request, no recompute
step per block, one append per later block (docs/architecture.md, "Block diffusion")."""

import numpy as np
import pytest

from dilaserve.control.batch_cost import mixed_step_prices
from dilaserve.control.config import ControlConfig
from dilaserve.control.controller import ThresholdController
from dilaserve.control.cost_model import (
    CapacityModel,
    RequestShape,
    appends_left,
    recompute_steps_over_life,
    remaining_time,
    request_load,
)
from dilaserve.control.step_law import StepLaw, step_split
from dilaserve.engine.state import StepKind
from dilaserve.profile.types import LatencyProfile, StepCurve
from tests.control.builders import TablePredictor, commit, make_request

B = 32


def sloped_profile() -> LatencyProfile:
    """LP_cache[n] = n / 32 s and LP_recompute[n] = n / 100 s (through the origin's line)."""
    cache = StepCurve.from_points([(32, 1.0), (64, 2.0)])
    rec = StepCurve.from_points([(100, 1.0), (200, 2.0)])
    return LatencyProfile("sloped", {1: rec}, {1: cache})


def test_step_split_per_family():
    # 24 steps of a 100-token prompt and a 3-block canvas.
    bi = step_split(24, 100, 96, B)
    assert (bi.recompute_steps, bi.cache_steps, bi.recompute_tokens, bi.appends) == (3, 21, 196, 0)
    assert bi.work == 21 * 32 + 3 * 196
    bc = step_split(24, 100, 96, B, block_causal=True)
    # one prefill over prompt + first block, every other step a cache step, two appends
    assert (bc.recompute_steps, bc.cache_steps, bc.recompute_tokens, bc.appends) == (1, 23, 132, 2)
    assert bc.work == 23 * 32 + 2 * 32 + 132
    assert bc.fed_per_cache_step == pytest.approx(32 + 2 * 32 / 23)


def test_split_seconds_price_each_step_on_its_curve():
    p = sloped_profile()
    bc = step_split(24, 100, 96, B, block_causal=True)
    fed = 32 + 64 / 23
    expected = 23 * fed / 32 + 132 / 100
    assert bc.seconds(p.curve(1, StepKind.CACHE), p.curve(1)) == pytest.approx(expected)
    # two requests together: every pass twice the tokens
    two = bc.seconds(p.curve(1, StepKind.CACHE), p.curve(1), np.array([2.0]))
    assert two[0] == pytest.approx(2 * expected)


def test_law_split_follows_the_family():
    law = StepLaw.from_tokens_per_step({0.9: 4.0}, B)  # S = 8 steps per block
    assert law.split(0.9, 100, 96).recompute_steps == 3
    bc = law.with_family(True).split(0.9, 100, 96)
    assert (bc.cache_steps, bc.recompute_steps, bc.appends) == (23, 1, 2)


def test_capacity_of_a_block_causal_request_has_no_recompute_per_block():
    flat = LatencyProfile("flat", {1: StepCurve((1.0,), (1.0,))}, {1: StepCurve((1.0,), (1.0,))})
    split = StepLaw.from_tokens_per_step({0.9: 4.0}, B).with_family(True).split(0.9, 100, 96)
    # one request per instance: 932 token-steps in 24 one-second steps
    assert CapacityModel(flat).throughput(1, 196, split) == pytest.approx((23 * 32 + 2 * 32 + 132) / 24)
    bi = StepLaw.from_tokens_per_step({0.9: 4.0}, B).split(0.9, 100, 96)
    assert CapacityModel(flat).throughput(1, 196, bi) == pytest.approx((21 * 32 + 3 * 196) / 24)


def test_block_causal_request_load_counts_its_prefill_and_appends():
    req = make_request("a", prompt=100, gen=96, block_causal=True)
    assert req.state.recompute_left_lower_bound == 1 and appends_left(req.state) == 2
    load = request_load(np.array([[24.0]]), RequestShape.of([req]))
    # (24 - 1) x 32 + the prefill over 100 + 32 tokens + 2 appends x 32
    assert load[0, 0] == 23 * 32 + 132 + 2 * 32
    commit(req, 32)  # prefill done, first block finished: its append is pending
    assert req.state.recompute_left_lower_bound == 0 and appends_left(req.state) == 2
    commit(req, 32)  # the second block's first step wrote the first block's K/V
    assert appends_left(req.state) == 1
    load = request_load(np.array([[8.0]]), RequestShape.of([req]))
    assert load[0, 0] == 8 * 32 + 32
    assert recompute_steps_over_life(req.state) == 1


def test_bidirectional_load_is_unchanged_by_the_family_fields():
    req = make_request("a", prompt=100, gen=64)
    assert appends_left(req.state) == 0 and recompute_steps_over_life(req.state) == 2
    assert request_load(np.array([[10.0]]), RequestShape.of([req]))[0, 0] == 8 * 32 + 2 * 164


def test_remaining_time_adds_each_append_at_its_marginal_cost():
    p = sloped_profile()
    req = make_request("a", prompt=100, gen=96, block_causal=True)
    t = remaining_time(np.array([[24.0]]), RequestShape.of([req]), p, 1, inst_tokens=392, inst_requests=2)
    # 23 cache steps at LP_cache[64] = 2 s, the prefill at LP_recompute[392], 2 appends of
    # LP_cache[96] - LP_cache[64] = 1 s
    assert t[0, 0] == pytest.approx(23 * 2.0 + 3.92 + 2 * 1.0)


def test_controller_prices_appends_in_selection():
    cfg = ControlConfig(thresholds=(0.5, 0.9), fixed_threshold=0.9)
    ctl = ThresholdController(
        cfg, sloped_profile(), TablePredictor([24, 24]), selection="paper", load_control="none", step_pricing="paper"
    )
    req = make_request("a", prompt=100, gen=96, block_causal=True)
    ctl.prepare_arrival(req, now=0.0)
    remaining = ctl._remaining_fn(req, 1, 392, 2)
    assert remaining(1) == pytest.approx(23 * 2.0 + 3.92 + 2 * 1.0)


def test_mixed_prices_count_batch_mates_appends():
    p = sloped_profile()
    base = mixed_step_prices(p, 1, 2, 400, 200, B, recompute_share=0.0)
    appending = mixed_step_prices(p, 1, 2, 400, 200, B, recompute_share=0.0, append_share=0.5)
    # the other request feeds 32 tokens, plus 16 on average for its appends
    assert base.cache == pytest.approx(64 / 32) and appending.cache == pytest.approx(80 / 32)
    own = mixed_step_prices(p, 1, 1, 200, 200, B, 0.0, own_recompute_tokens=132)
    assert own.recompute == pytest.approx(1.32)


def test_load_control_prices_capacity_in_the_laws_family():
    law = StepLaw.from_tokens_per_step({0.5: 8.0, 0.9: 4.0}, B)
    flat = LatencyProfile("flat", {1: StepCurve((1.0,), (1.0,))}, {1: StepCurve((1.0,), (1.0,))})
    caps = {}
    for bc in (False, True):
        cfg = ControlConfig(thresholds=(0.5, 0.9), fixed_threshold=0.9, step_law=law.with_family(bc))
        ctl = ThresholdController(cfg, flat, TablePredictor([12, 24]), selection="paper", load_control="paper")
        req = make_request("a", prompt=100, gen=96, block_causal=bc, slo=1.0)
        ctl.prepare_arrival(req, now=0.0)
        ctl.control_load([req], [(1, 196)], now=0.0)
        split = law.with_family(bc).split(0.5, 100, 96)  # the lowest threshold in flight
        caps[bc] = ctl.capacity.throughput(1, 196, split)
    # S = 4 at 0.5: bidirectional 3 blocks x (3 x 32 + 196) in 12 s, block-causal 11 x 32 + 64 + 132 in 12 s
    assert caps[False] == pytest.approx(3 * (3 * 32 + 196) / 12)
    assert caps[True] == pytest.approx((11 * 32 + 64 + 132) / 12)
