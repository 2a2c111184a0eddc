"""Regression tests: stage 1 prices the real step mix, and a plan is applied only when it
cannot hurt (current configuration scored fairly, tie-break never worsens the plan,
capacity and payback checks)."""

import logging
from dataclasses import replace

import pytest

from dilaserve.cluster.base import InstanceSpec
from dilaserve.control.step_law import StepLaw
from dilaserve.engine.state import StepKind
from dilaserve.profile.analytic import analytic_profile
from dilaserve.reconfig import ClusterConfig, ReconfigConfig, Reconfigurator, RequestClass, solve_capacity, stage1
from dilaserve.reconfig.solver import NO_SOLUTION, SolveResult
from dilaserve.reconfig.stage1 import capacity_rps, check_capacity_plan, class_latency
from tests.control.builders import linear_profile

H100 = analytic_profile("llada-8b", "h100", (1, 2, 4))
LAW = StepLaw.from_tokens_per_step({0.5: 6.0, 0.7: 5.0, 0.9: 4.0}, 32)


def reconfigurator(cluster: ClusterConfig, profile=H100, **kw) -> Reconfigurator:
    return Reconfigurator(cluster, profile, ReconfigConfig(**kw).with_step_law(LAW))


def tp1(n: int, node: int = 0) -> list[InstanceSpec]:
    return [InstanceSpec(f"t1-{node}-{g}", 1, node, (g,), 32768) for g in range(n)]


def test_stage1_latency_is_the_engine_step_mix():
    # 1 GPU, prompt 1500, output 128 (4 blocks), T_0.9 = 4, B = 32: each block is one
    # recompute step over 1628 tokens and 7 cache steps over 32 (the paper's pattern gave 0.303 s).
    rec = Reconfigurator(
        ClusterConfig(nodes=1, gpus_per_node=1, tp_degrees=(1,)),
        H100,
        ReconfigConfig().with_step_law(StepLaw.from_tokens_per_step({0.9: 4.0}, 32)),
    )
    pb = rec.problem([RequestClass((0, 0), 0.01, 1500.0, 128.0, 100.0)])
    plan = solve_capacity(pb, 5)
    assert plan is not None and check_capacity_plan(pb, plan) == []
    engine = 4 * H100.latency(1, 1628, StepKind.RECOMPUTE) + 28 * H100.latency(1, 32, StepKind.CACHE)
    assert class_latency(pb, plan.batch, plan.steps_on, plan.recompute_on)[0] == pytest.approx(engine, rel=1e-6)
    assert engine == pytest.approx(0.422, abs=1e-3)
    assert plan.recompute_on.sum() == pytest.approx(4.0)


def test_idle_gpus_do_not_make_the_current_cluster_infeasible():
    # 1 node x 4 GPUs running 2 TP-1 instances, 0.6 req/s, SLO 30 s: nothing to gain.
    rec = reconfigurator(ClusterConfig(nodes=1, gpus_per_node=4))
    for i in range(36):
        rec.monitor.observe(i / 0.6, 1000, 256, 30.0)
    existing = tp1(2)
    pb = rec.problem(rec.monitor.classes(60.0))
    current = solve_capacity(replace(pb, fixed_counts={1: 2}), 5)
    assert current is not None and check_capacity_plan(replace(pb, fixed_counts={1: 2}), current) == []
    assert current.counts == {1: 2, 2: 0, 4: 0}
    assert rec.propose(60.0, existing) is None


def test_tiebreak_that_finds_nothing_keeps_the_first_solution(monkeypatch):
    rec = reconfigurator(ClusterConfig(nodes=1, gpus_per_node=4))
    pb = rec.problem([RequestClass((0, 0), 1.0, 1000.0, 256.0, 30.0)])
    first = solve_capacity(pb, 5)
    real = stage1.solve
    calls = []

    def flaky(prob, time_limit_s, rel_gap=None, warm_start=False):
        calls.append(time_limit_s)
        if len(calls) == 1:
            return real(prob, time_limit_s, rel_gap, warm_start)
        return SolveResult(NO_SOLUTION, "CBC", time_limit_s)  # the tie-break ran out

    monkeypatch.setattr(stage1, "solve", flaky)
    plan = solve_capacity(pb, 5, 0.3)
    assert len(calls) == 2 and calls[1] == pytest.approx(0.3)
    assert plan is not None and check_capacity_plan(pb, plan) == []
    assert plan.quality == pytest.approx(first.quality, abs=1e-5)  # the first solve's plan, not None


def test_tiebreak_budget_default_is_seconds_not_a_fraction():
    assert ReconfigConfig().tiebreak_time_s >= 3.0


def _tp4_wins(**kw) -> tuple[Reconfigurator, list[InstanceSpec]]:
    # Per-token cost dominates: TP-4 runs a 64-token answer well within a 0.3 s SLO at 0.9,
    # TP-1 must lower the threshold (as in the scheduler's end-to-end test).
    profile = linear_profile({1: 4e-4, 2: 3e-4, 4: 1.8e-4}, base=0.001)
    rec = reconfigurator(ClusterConfig(nodes=1, gpus_per_node=4), profile, **kw)
    for i in range(20):
        rec.monitor.observe(0.5 * i, 100, 64, 0.3)
    return rec, tp1(4)


def test_a_plan_that_pays_back_is_applied():
    rec, existing = _tp4_wins()
    plan = rec.propose(10.0, existing)
    assert plan is not None and plan.counts == {4: 1}


def test_a_plan_whose_drain_and_launch_cost_more_than_it_gains_is_not_applied(caplog):
    rec, existing = _tp4_wins(launch_time_s=1e5)
    with caplog.at_level(logging.INFO):
        assert rec.propose(10.0, existing) is None
    assert "does not repay" in caplog.text


def test_a_plan_that_cannot_carry_the_rate_at_the_lowest_threshold_is_not_applied(caplog):
    rec, existing = _tp4_wins(capacity_headroom=1e4)
    with caplog.at_level(logging.INFO):
        assert rec.propose(10.0, existing) is None
    assert "at the lowest threshold" in caplog.text


def test_carried_rate_is_the_layouts_capacity_for_the_recent_mix():
    rec, existing = _tp4_wins()
    assert rec.carried_rps(10.0, existing) == pytest.approx(4 * rec.carried_rps(10.0, existing[:1]))
    assert rec.carried_rps(10.0, existing) == pytest.approx(
        capacity_rps(rec.problem(rec.monitor.classes(10.0)), {1: 4})
    )
    idle = reconfigurator(ClusterConfig(nodes=1, gpus_per_node=4))
    assert idle.carried_rps(10.0, existing) == 0.0  # no arrivals yet: no mix to size


def test_the_peak_a_plan_must_hold_is_the_operators_where_given():
    rec, existing = _tp4_wins()
    assert rec.peak_rps(10.0, existing) == rec.carried_rps(10.0, existing)
    given = Reconfigurator(rec.cluster, rec.profile, replace(rec.config, peak_rps=7.5), rec.monitor)
    assert given.peak_rps(10.0, existing) == 7.5


def test_capacity_counts_recompute_steps_over_the_whole_canvas():
    rec = reconfigurator(ClusterConfig(nodes=1, gpus_per_node=1, tp_degrees=(1,)))
    pb = rec.problem([RequestClass((0, 0), 1.0, 2000.0, 32.0, 30.0)])
    one_block = capacity_rps(pb, {1: 1})
    # One block at T_0.5 = 6: one recompute step + 32/6 - 1 cache steps, at the best batch.
    best = max(
        b / (H100.latency(1, b * 2032, StepKind.RECOMPUTE) + (32 / 6 - 1) * H100.latency(1, b * 32, StepKind.CACHE))
        for b in pb.batches(1)
    )
    assert one_block == pytest.approx(best, rel=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(capacity_headroom=-0.1), "extra arrival rate"),
        (dict(launch_time_s=-1), "load its weights"),
        (dict(drain_time_s=-1), "drain_time_s"),
        (dict(tokens_per_step={0.9: 40.0}, block_length=32), "at least one step"),
        (dict(peak_rps=0), "positive request rate"),
    ],
)
def test_reconfig_config_errors_say_how_to_fix(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ReconfigConfig(**kwargs)


def test_long_prompt_one_block_answers_keep_the_all_tp1_cluster():
    # Long prompts, one-block answers, near capacity: every block's recompute step runs the
    # whole prompt, so TP-4 (fewer instances) cannot carry the load that TP-1 x 4 carries,
    # and no plan may trade the running cluster for it.
    rec = reconfigurator(ClusterConfig(nodes=1, gpus_per_node=4))
    alone = H100.latency(1, 2032, StepKind.RECOMPUTE) + 7 * H100.latency(1, 32, StepKind.CACHE)
    pb = rec.problem([RequestClass((0, 0), 1.0, 2000.0, 32.0, 5 * alone)])
    rate = 0.8 * capacity_rps(pb, {1: 4}, 0.9)
    for i in range(int(rate * 60)):
        rec.monitor.observe(i / rate, 2000, 32, 5 * alone)
    assert rec.propose(60.0, tp1(4)) is None


def test_an_slo_no_layout_meets_warns_only_when_the_fallback_changes_the_cluster(caplog):
    """A window holding a request whose SLO no layout meets makes stage 1 infeasible. On the
    all-TP-1 cluster the fallback changes nothing: one INFO line per tick, no warning; from a
    TP-2 cluster the fallback acts, and says so."""
    rec = reconfigurator(ClusterConfig(nodes=1, gpus_per_node=2, tp_degrees=(1, 2)))
    for i in range(5):
        rec.monitor.observe(float(i), 1000, 256, 0.001)
    with caplog.at_level(logging.INFO, logger="dilaserve.reconfig"):
        assert rec.propose(10.0, tp1(2)) is None
    assert "stage 1 infeasible" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dilaserve.reconfig"):
        plan = rec.propose(10.0, [InstanceSpec("t2", 2, 0, (0, 1), 65536)])
    assert plan is not None and plan.counts == {1: 2}
    assert [r.levelno for r in caplog.records if "falling back" in r.getMessage()] == [logging.WARNING]
