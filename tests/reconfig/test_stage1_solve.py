"""Stage 1 solves to proven optimality, and its warm-started tie-break matches the old
two-solve McCormick method on the average threshold with at least as much SLO slack."""

import pytest

from dilaserve.bench.control import bench_classes, synthetic_profile
from dilaserve.reconfig import CapacityProblem, ClusterConfig, ReconfigConfig, Reconfigurator, RequestClass
from dilaserve.reconfig.solver import FEASIBLE, OPTIMAL, SolveResult
from dilaserve.reconfig.stage1 import check_capacity_plan, pack_nodes, solve_capacity
from tests.reconfig.mccormick_reference import reference_solve

THR, TPS = (0.5, 0.7, 0.9), (3.0, 2.0, 1.25)
FACTOR = {1: 1.0, 2: 0.75, 4: 0.45}


def small(classes, nodes=1, **kw) -> CapacityProblem:
    """1-2 nodes of 4 GPUs, three batch sizes, cache steps cheaper than recompute steps."""
    cache = {(d, b): (0.02 + 0.002 * b) * f for d, f in FACTOR.items() for b in (1, 4, 16)}
    recompute = {(d, b): (0.05 + 0.01 * b) * f for d, f in FACTOR.items() for b in (1, 4, 16)}
    return CapacityProblem(
        tuple(classes), THR, TPS, (1, 2, 4), nodes, 4, cache, recompute_latency=recompute, block_length=32, **kw
    )


def k(i, rate, out, slo, prompt=100.0):
    return RequestClass((i, 0), rate, prompt, out, slo)


SMALL = {
    "light, one node": small([k(0, 2.0, 128.0, 8.0), k(1, 1.0, 256.0, 12.0)]),
    "tight SLOs lower the threshold": small([k(0, 4.0, 128.0, 2.5), k(1, 2.0, 256.0, 6.0)]),
    "three classes, two nodes": small([k(0, 10.0, 64.0, 3.0), k(1, 5.0, 128.0, 5.0), k(2, 2.0, 256.0, 9.0)], nodes=2),
    "running cluster with an idle GPU": small([k(0, 3.0, 128.0, 6.0)], fixed_counts={1: 1, 2: 1}),
    "block-causal": small([k(0, 6.0, 96.0, 4.0), k(1, 3.0, 192.0, 8.0)], nodes=2, block_causal=True),
}


@pytest.mark.parametrize("name", SMALL)
def test_tiebreak_keeps_the_old_methods_threshold_with_at_least_its_slack(name):
    pb = SMALL[name]
    plan = solve_capacity(pb, time_limit_s=60.0, tiebreak_time_s=60.0)
    ref = reference_solve(pb)
    assert plan is not None and ref is not None
    assert check_capacity_plan(pb, plan) == []
    assert plan.solve.optimal, plan.solve
    quality, slack = ref
    assert plan.quality == pytest.approx(quality, abs=1e-5)
    assert plan.slack >= slack - 1e-6


def test_stage1_proves_optimality_on_the_control_bench_problem():
    # The control bench's 16-GPU problem: 8 classes, TP 1/2/4, seven batch sizes.
    cluster = ClusterConfig(nodes=4, gpus_per_node=4)
    rec = Reconfigurator(cluster, synthetic_profile(), ReconfigConfig(block_length=32))
    pb = rec.problem(bench_classes(16))
    plan = solve_capacity(pb, time_limit_s=120.0, tiebreak_time_s=120.0)
    assert plan is not None and check_capacity_plan(pb, plan) == []
    assert plan.solve.status == OPTIMAL  # both solves, neither at a time limit
    assert plan.quality == pytest.approx(0.9, abs=1e-5)  # light enough for the top threshold
    assert sum(d * n for d, n in plan.counts.items()) == 16


def test_two_solves_are_optimal_only_when_both_are():
    opt, feas = SolveResult(OPTIMAL, "HiGHS", 0.5), SolveResult(FEASIBLE, "HiGHS", 3.0)
    assert opt.then(opt).optimal and opt.then(opt).seconds == pytest.approx(1.0)
    assert opt.then(feas).status == FEASIBLE and feas.then(opt).status == FEASIBLE
    assert opt.then(SolveResult(OPTIMAL, "CBC", 0.1)).solver == "HiGHS+CBC"


def test_pack_nodes_fills_nodes_largest_degree_first():
    assert pack_nodes({1: 2, 2: 3, 4: 1}, 3, 4) == ({1: 0, 2: 0, 4: 1}, {1: 0, 2: 2, 4: 0}, {1: 2, 2: 1, 4: 0})
    assert pack_nodes({1: 1, 2: 1}, 2, 4) == ({1: 1, 2: 1}, {1: 0, 2: 0})  # the running cluster may idle GPUs
    with pytest.raises(ValueError, match="more than 1 x 4 GPUs"):
        pack_nodes({4: 1, 1: 1}, 1, 4)


def test_capacity_problem_rejects_degrees_that_do_not_pack():
    with pytest.raises(ValueError, match="power of two that divides"):
        CapacityProblem((), THR, TPS, (3,), 1, 4, {})
