"""Planning ahead: the rate forecast, how long a layout holds it, the reach check that turns
planning ahead on, and the plans it makes (a tier only TP-4 can serve at low load, TP-1's
throughput at the peak)."""

from dataclasses import replace

import numpy as np
import pytest

from dilaserve.control.step_law import StepLaw, step_split
from dilaserve.engine.state import StepKind
from dilaserve.profile.analytic import analytic_profile
from dilaserve.reconfig import (
    ClusterConfig,
    MonitorConfig,
    ReconfigConfig,
    Reconfigurator,
    RequestClass,
    WorkloadMonitor,
)
from dilaserve.reconfig.forecast import (
    alone_s,
    alone_s_many,
    fastest_alone_s,
    forecast_rate,
    holding_time_s,
    out_of_reach,
    reach_node_counts,
    tiers_out_of_reach,
)
from dilaserve.reconfig.plan import static_layout
from dilaserve.reconfig.stage1 import capacity_rps

H100 = analytic_profile("llada-8b", "h100", (1, 2, 4))
LAW = StepLaw.from_tokens_per_step({0.5: 6.0, 0.7: 5.0, 0.9: 4.0}, 32)
CLUSTER = ClusterConfig(nodes=4, gpus_per_node=4)
PROMPT, GEN = 150, 256


def _even(rate_at, start: float, end: float) -> list[float]:
    """Arrival times from ``start`` to ``end`` at the rate ``rate_at(t)`` (deterministic)."""
    out, t = [], start
    while t < end:
        out.append(t)
        t += 1.0 / rate_at(t)
    return out


def test_forecast_carries_the_trend_forward():
    flat = _even(lambda t: 10.0, 0.0, 60.0)
    assert forecast_rate(flat, 60.0, 60.0, 60.0) == pytest.approx(10.0, rel=0.05)
    rising = _even(lambda t: 5.0 + t / 6.0, 0.0, 60.0)  # 5/s to 15/s over the window
    # Mean of the next 60 s on the same line: 15 + 10 / 2 = 20/s; now about 15/s.
    assert forecast_rate(rising, 60.0, 60.0, 60.0) == pytest.approx(20.0, rel=0.1)
    assert forecast_rate(rising, 60.0, 60.0, 0.0) == pytest.approx(15.0, rel=0.1)
    falling = _even(lambda t: 15.0 - t / 6.0, 0.0, 60.0)
    assert forecast_rate(falling, 60.0, 60.0, 600.0) == 0.0  # never below zero
    assert forecast_rate([1.0, 2.0], 60.0, 60.0, 60.0) == pytest.approx(2 / 59)  # too few: the mean since the first
    # A window longer than the arrivals seen so far reads no rise from the time before them.
    assert forecast_rate(_even(lambda t: 10.0, 30.0, 60.0), 60.0, 60.0, 60.0) == pytest.approx(10.0, rel=0.05)
    with pytest.raises(ValueError, match="bins"):
        forecast_rate(flat, 60.0, 60.0, 60.0, bins=1)


def test_holding_time_is_when_the_forecast_outgrows_the_layout():
    assert holding_time_s(10.0, 10.0, 300.0, 20.0) == 300.0  # flat: holds the whole lifetime
    assert holding_time_s(10.0, 5.0, 300.0, 20.0) == 300.0  # falling
    # Rising from 10/s with a mean of 15/s over 300 s: 10 + t / 30 reaches 20/s at 300 s, 15/s at 150 s.
    assert holding_time_s(10.0, 15.0, 300.0, 15.0) == pytest.approx(150.0)
    assert holding_time_s(25.0, 25.0, 300.0, 20.0) == 0.0  # already outgrown
    assert holding_time_s(10.0, 15.0, 300.0, 20.0, limit_s=1000.0) == pytest.approx(300.0)  # the line, carried on
    assert holding_time_s(10.0, 10.0, 60.0, 20.0, limit_s=1000.0) == 1000.0


def _reconfigurator() -> Reconfigurator:
    return Reconfigurator(
        CLUSTER, H100, ReconfigConfig(interval_s=60.0).with_step_law(LAW), WorkloadMonitor(MonitorConfig(window_s=60.0))
    )


#: Seconds of a request alone on TP-1 at 0.9 (T = 4 tokens per step): its tier SLOs' unit.
ALONE_09 = float(
    step_split(GEN / 4.0, PROMPT, GEN, 32).seconds(H100.curve(1, StepKind.CACHE), H100.curve(1, StepKind.RECOMPUTE))
)


def _observe(rec: Reconfigurator, interactive_scale: float, rate_at, start: float = 0.0, end: float = 60.0):
    """A third of the arrivals interactive (priority 1) at ``interactive_scale`` x
    ``ALONE_09``, the rest standard at 5x."""
    for i, t in enumerate(_even(rate_at, start, end)):
        tight = i % 3 == 0
        rec.monitor.observe(t, PROMPT, GEN, (interactive_scale if tight else 5.0) * ALONE_09, 1 if tight else 0)


def test_reach_check_finds_a_tier_only_a_faster_degree_serves():
    rec = _reconfigurator()
    _observe(rec, 0.55, lambda t: 6.0)
    home = static_layout(CLUSTER, 1)
    pb = rec.problem(rec.monitor.classes(60.0, by_tier=True))
    assert out_of_reach(pb, [1]) == [1]  # the interactive class (priority 1 sorts last)
    assert out_of_reach(pb, [1, 2, 4]) == []
    assert rec.needs_reach(60.0, home)
    assert not rec.needs_reach(60.0, static_layout(CLUSTER, 4))  # TP-4 reaches it already
    # A tier TP-1 reaches at the lowest threshold: no planning ahead.
    loose = _reconfigurator()
    _observe(loose, 2.0, lambda t: 6.0)
    assert not loose.needs_reach(60.0, home)


def test_plan_ahead_buys_tp4_at_low_load_and_refuses_it_before_a_rise():
    rec = _reconfigurator()
    _observe(rec, 0.55, lambda t: 6.0)
    home = static_layout(CLUSTER, 1)
    plan = rec.propose_ahead(60.0, home, home)
    assert plan is not None and plan.counts.get(4, 0) >= 1
    assert plan.hold_s == pytest.approx(rec.config.lifetime_s) and plan.peak_rps == pytest.approx(6.0, rel=0.1)
    # The same load rising steeply towards what only TP-1 carries: the plan would not hold.
    steep = _reconfigurator()
    top = capacity_rps(steep.problem(rec.monitor.classes(60.0, by_tier=True)), {1: 16})  # all TP-1's most
    _observe(steep, 0.55, lambda t: 6.0 + (top / 2 - 6.0) * t / 60.0)
    ahead = steep.propose_ahead(60.0, home, home)
    assert ahead is None or ahead.counts.get(4, 0) < plan.counts[4]


def test_monitor_splits_classes_by_tier_only_when_asked():
    mon = WorkloadMonitor(MonitorConfig(window_s=60.0))
    for i in range(30):
        mon.observe(float(i), PROMPT, GEN, 1.0 if i % 2 else 10.0, i % 2)
    merged, split = mon.classes(30.0), mon.classes(30.0, by_tier=True)
    assert len(merged) == 1 and merged[0].slo_s == 1.0  # the tightest SLO of the class
    assert [k.key[-1] for k in split] == [0, 1] and [k.slo_s for k in split] == [10.0, 1.0]
    assert sum(k.rate for k in split) == pytest.approx(merged[0].rate)
    assert mon.arrivals(30.0) == [float(i) for i in range(30)]


def test_reach_is_judged_at_the_lowest_threshold_the_controller_may_run():
    """A tier TP-1 reaches only at 0.5 is out of its reach where the quality budget stops the
    controller at 0.7."""
    probe = _reconfigurator().problem(
        [RequestClass((0, 1), 1.0, float(PROMPT), float(GEN), ALONE_09)]  # SLO: alone at 0.9
    )
    at_05, at_07 = (float(fastest_alone_s(probe, 1, t)[0]) / ALONE_09 for t in (0.5, 0.7))
    assert at_05 < at_07 < 1.0
    assert float(fastest_alone_s(probe, 1, 0.6)[0]) == pytest.approx(at_07 * ALONE_09)  # the next one up
    rec = _reconfigurator()
    _observe(rec, (at_05 + at_07) / 2, lambda t: 6.0)
    home = static_layout(CLUSTER, 1)
    assert not rec.needs_reach(60.0, home)
    assert rec.needs_reach(60.0, home, lowest=0.7)


def test_tick_plans_ahead_only_where_a_tier_is_out_of_reach_and_prices_the_plan_by_its_hold():
    home = static_layout(CLUSTER, 1)
    rec = _reconfigurator()
    _observe(rec, 0.55, lambda t: 6.0)
    plan = rec.tick(60.0, home, home, lowest=0.7)
    assert plan is not None and plan.reason.startswith("ahead")
    share, peak = rec.replay_terms(60.0, plan, home)
    assert share == pytest.approx(plan.transition_s / plan.hold_s) and peak == plan.peak_rps
    # A tier TP-1 reaches: the tick is the plain proposal, judged at the starting layout's peak.
    loose = _reconfigurator()
    _observe(loose, 5.0, lambda t: 6.0)
    plain = loose.tick(60.0, home, home, lowest=0.7)
    assert plain is None or not plain.reason.startswith("ahead")
    other = replace(plan, hold_s=None, peak_rps=None)
    share, peak = loose.replay_terms(60.0, other, home)
    assert share == pytest.approx(plan.transition_s / loose.config.lifetime_s)
    assert peak == pytest.approx(loose.peak_rps(60.0, home)) and peak > 0


@pytest.mark.parametrize("block_causal", [False, True])
def test_many_requests_alone_cost_what_each_costs_alone(block_causal):
    """The reach check's vectorised time alone is the per-request one, to the float, in
    both families and for requests shorter than a block."""
    rng = np.random.default_rng(0)
    prompts, outputs = rng.integers(1, 4000, 200), rng.integers(1, 1200, 200)
    for tp in (1, 4):
        many = alone_s_many(H100, tp, prompts, outputs, 5.0, 32, block_causal)
        one = [alone_s(H100, tp, int(p), int(o), 5.0, 32, block_causal) for p, o in zip(prompts, outputs)]
        assert many.tolist() == one


def test_reach_is_judged_request_by_request():
    """Tier 0's requests each get 1.1 x their own time alone on TP-1, tier 1's 0.9 x (which
    TP-4 meets). Tier 0's length class holds long and short requests, so its tightest SLO
    (a short one's) is below what its mean request takes alone: a class-level check would
    call it out of reach; the request-level check calls only tier 1 out of reach."""
    per_step = LAW.tokens_per_step_at([0.5])[0.5]
    requests = []
    for k, (p, o) in enumerate([(40, 64), (200, 256)] * 10):
        alone = alone_s(H100, 1, p, o, per_step, 32)
        requests.append((p, o, (1.1 if k % 4 < 2 else 0.9) * alone, 0 if k % 4 < 2 else 1))
    assert tiers_out_of_reach(requests, H100, [1], [1, 4], per_step, 32) == [1]
    assert tiers_out_of_reach(requests, H100, [1, 4], [1, 4], per_step, 32) == []
    mon = WorkloadMonitor(MonitorConfig(window_s=60.0, input_edges=(), output_edges=()))
    for p, o, slo, prio in requests:
        mon.observe(0.0, p, o, slo, prio)
    pb = _reconfigurator().problem(mon.classes(1.0, by_tier=True))
    assert out_of_reach(pb, [1], 0.5) == [0, 1]  # the class-level view flags both tiers


def test_reach_layout_gives_the_fast_degree_every_node_the_forecast_leaves_room_for():
    """The more of the load the fast degree's nodes must carry, the fewer of them: all TP-4
    at a load TP-4 carries, fewer TP-4 nodes as the load nears what TP-1 carries, none past it."""
    rec = _reconfigurator()
    _observe(rec, 0.55, lambda t: 6.0)
    pb = rec.problem(rec.monitor.classes(60.0, by_tier=True))
    tp4 = capacity_rps(pb, {4: CLUSTER.nodes})
    tp1 = capacity_rps(pb, {1: CLUSTER.nodes * CLUSTER.gpus_per_node})
    assert tp4 < tp1
    layouts = [reach_node_counts(pb, CLUSTER.gpus_per_node, 1, 4, need) for need in (0.5 * tp4, (tp4 + tp1) / 2, tp1)]
    fast = [sum(n.get(4, 0) for n in nc) if nc else 0 for nc in layouts]
    assert fast[0] == CLUSTER.nodes and 0 < fast[1] < CLUSTER.nodes and layouts[2] is None
    for nc in layouts[:2]:
        assert all(sum(d * n for d, n in node.items()) == CLUSTER.gpus_per_node for node in nc)
        counts = {d: sum(node.get(d, 0) for node in nc) for d in (1, 4)}
        assert capacity_rps(pb, counts) >= (0.5 * tp4 if nc is layouts[0] else (tp4 + tp1) / 2)
    capped = reach_node_counts(pb, CLUSTER.gpus_per_node, 1, 4, 0.5 * tp4, most_nodes=1)
    assert sum(n.get(4, 0) for n in capped) == 1
    # Without the reserve, planning ahead at a low load gives the tier out of reach as many
    # TP-4 nodes as one wave of the rolling update turns back (half the cluster's GPUs), not
    # the whole cluster; with it (the default, twice the forecast), the whole cluster, which
    # carries more than twice the load here.
    assert 2 * pb.total_rate * (1 + rec.config.capacity_headroom) < tp4
    assert rec.wave_nodes() == 2
    one_wave = Reconfigurator(CLUSTER, H100, replace(rec.config, reach_reserve=None), rec.monitor)
    plan = one_wave.propose_ahead(60.0, static_layout(CLUSTER, 1), static_layout(CLUSTER, 1))
    assert plan is not None and plan.counts == {4: 2, 1: 8}
    plan = rec.propose_ahead(60.0, static_layout(CLUSTER, 1), static_layout(CLUSTER, 1))
    assert plan is not None and plan.counts == {4: CLUSTER.nodes}
    whole = Reconfigurator(CLUSTER, H100, replace(rec.config, max_offline_share=1.0), rec.monitor)
    assert whole.wave_nodes() == CLUSTER.nodes


@pytest.mark.parametrize("rate", [6.0, 25.0, 30.0, 35.0, 40.0])
def test_past_one_wave_the_fast_nodes_must_carry_the_reserve(rate):
    """Past the nodes one wave turns back, the reach layout has the most TP-4 nodes whose
    layout carries ``reach_reserve`` (2) times the forecast with its headroom: all four at a
    load well below what all TP-4 carries, fewer as the load nears half of it, one wave (two)
    beyond; without the reserve always one wave."""
    rec = _reconfigurator()
    _observe(rec, 0.55, lambda t: rate)
    pb = rec.problem(rec.monitor.classes(60.0, by_tier=True))
    home = static_layout(CLUSTER, 1)
    need = pb.total_rate * (1 + rec.config.capacity_headroom)

    def fast_nodes(layout) -> int:
        return sum(4 in node for node in layout)

    layout = rec.reach_layout(pb, home)
    counts = {d: sum(node.get(d, 0) for node in layout) for d in (1, 4)}
    n = fast_nodes(layout)
    assert n >= rec.wave_nodes() == 2
    if n > rec.wave_nodes():  # carries the reserve, and one more TP-4 node would not
        assert capacity_rps(pb, counts, 0.5) >= 2 * need
        more = {4: n + 1, 1: (CLUSTER.nodes - n - 1) * CLUSTER.gpus_per_node}
        assert n == CLUSTER.nodes or capacity_rps(pb, more, 0.5) < 2 * need
    else:
        assert capacity_rps(pb, {4: 3, 1: CLUSTER.gpus_per_node}, 0.5) < 2 * need
    one_wave = Reconfigurator(CLUSTER, H100, replace(rec.config, reach_reserve=None), rec.monitor)
    assert fast_nodes(one_wave.reach_layout(pb, home)) == 2
    expected = {6.0: 4, 25.0: 4, 30.0: 3, 35.0: 2, 40.0: 2}[rate]
    assert n == expected


def test_the_reach_reserve_is_at_least_one():
    with pytest.raises(ValueError, match="reach_reserve=0.5 must be >= 1"):
        ReconfigConfig(reach_reserve=0.5)
