"""SLO tiers: each request's SLO is its tier's scale times its own isolated latency."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dilaserve.control.operating_point import OperatingPoint
from dilaserve.predict.replay import ReplayTable
from dilaserve.sim.arrivals import PhaseSpec, shape_trace
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.simulator import SimConfig, Simulator
from dilaserve.sim.slo import (
    DEFAULT_SLO_TIERS,
    isolated_latency,
    parse_slo_tiers,
    tier_priorities,
    with_slo_tiers,
)
from dilaserve.sim.traces import load_trace
from tests.sim.builders import predictors, quality, small_setting, varied_dynamics


def test_the_default_spec_parses_and_tighter_tiers_rank_higher():
    tiers = parse_slo_tiers(DEFAULT_SLO_TIERS)
    assert [t.name for t in tiers] == ["interactive", "standard", "batch"]
    assert tier_priorities(tiers) == {"interactive": 2, "standard": 1, "batch": 0}


@pytest.mark.parametrize(
    ("spec", "fix"),
    [
        ("interactive:0.3", "NAME:SHARE:SCALE"),
        ("a:0.5:1,b:0.4:5", "sum to 1"),
        ("a:half:1,b:0.5:5", "must be numbers"),
        ("a:0.5:1,a:0.5:5", "twice"),
        ("a:0.5:-1,b:0.5:5", "must be positive"),
        ("a:0.5:1:1.5,b:0.5:5", "quality floor"),
        ("a:0.5:1:0.9:x,b:0.5:5", "NAME:SHARE:SCALE:FLOOR"),
    ],
)
def test_a_malformed_spec_says_how_to_write_it(spec, fix):
    with pytest.raises(ValueError, match=fix):
        parse_slo_tiers(spec)


def test_each_request_gets_its_tiers_scale_times_its_own_isolated_latency():
    dyn = varied_dynamics()
    setting, table = small_setting(dyn), ReplayTable(dyn)
    wl = shape_trace(load_trace(), [PhaseSpec("low", 20, 5.0), PhaseSpec("high", 20, 10.0)])
    tiers = parse_slo_tiers("fast:0.4:1.5,slow:0.6:10")
    tiered = with_slo_tiers(wl, tiers, setting.profile, table, setting.block_length, 0.9, seed=3)
    assert [r.arrival for r in tiered.requests] == [r.arrival for r in wl.requests]
    names = [r.tier for r in tiered.requests]
    assert 0.25 < names.count("fast") / len(names) < 0.55
    for r in tiered.requests:
        alone = isolated_latency(setting.profile, table, r.prompt_tokens, r.output_tokens, setting.block_length, 0.9)
        scale = 1.5 if r.tier == "fast" else 10.0
        assert r.slo_s == pytest.approx(scale * alone)
        assert r.priority == (1 if r.tier == "fast" else 0)
    again = with_slo_tiers(wl, tiers, setting.profile, table, setting.block_length, 0.9, seed=3)
    assert [r.tier for r in again.requests] == names  # seeded


def test_a_tier_may_carry_a_quality_floor_and_a_simulated_request_keeps_it():
    """``NAME:SHARE:SCALE:FLOOR``: the tier's requests carry the floor, and the controller
    runs them at or above it whatever the operating point pins, as a server's clients'
    ``min_threshold``; a tier without one has none."""
    dyn = varied_dynamics()
    setting, table = small_setting(dyn), ReplayTable(dyn)
    wl = shape_trace(load_trace(), [PhaseSpec("low", 20, 2.0)])
    tiers = parse_slo_tiers("picky:0.5:10:0.9,plain:0.5:10")
    assert [t.spec for t in tiers] == ["picky:0.5:10:0.9", "plain:0.5:10"]
    tiered = with_slo_tiers(wl, tiers, setting.profile, table, setting.block_length, 0.9, seed=3)
    assert {(r.tier, r.min_threshold) for r in tiered.requests} == {("picky", 0.9), ("plain", 0.0)}
    assert tiered.meta["slo_tiers"] == "picky:0.5:10:0.9,plain:0.5:10"
    pinned = replace(setting, control=replace(setting.control, operating_point=OperatingPoint.static(0.5)))
    sim = Simulator(pinned, ReplayProgress(table, quality(), seed=0), predictors(table), SimConfig())
    rows = sim.run("dilaserve-no-tuner", tiered, 10.0).requests
    assert rows.filter(rows["tier"] == "picky")["mean_threshold"].min() >= 0.9 - 1e-9  # lifted to its floor
    assert rows.filter(rows["tier"] == "plain")["mean_threshold"].max() <= 0.5 + 1e-9  # at the pin
