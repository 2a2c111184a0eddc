import logging

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from dilaserve.cluster.base import InstanceReady, InstanceSpec, InstanceStopped, StepFinished
from dilaserve.engine.state import StepKind
from dilaserve.predict.base import OneShotPredictor
from dilaserve.reconfig import (
    CapacityProblem,
    ClusterConfig,
    Drain,
    Launch,
    MonitorConfig,
    PlanExecutor,
    PlanStep,
    ReconfigConfig,
    ReconfigPlan,
    Reconfigurator,
    RequestClass,
    Stop,
    WorkloadMonitor,
    build_plan,
    check_capacity_plan,
    check_placement,
    greedy_placement,
    solve_capacity,
    solve_placement,
    static_layout,
)
from dilaserve.reconfig.stage1 import capacity_rps
from dilaserve.schedule import ReconfigTick, RequestArrived
from tests.builders.schedule import build_scheduler
from tests.control.builders import default_profile, linear_profile, make_request
from tests.reconfig.mccormick_reference import node_patterns
from tests.schedule.fake_backend import RecordingBackend

THR, TPS = (0.5, 0.7, 0.9), (3.0, 2.0, 1.25)


def problem(classes, nodes=2, gpus=4, degrees=(1, 2, 4), latency=None, **kw):
    latency = latency or {
        (d, b): (0.02 + 0.002 * b) * f for d, f in zip((1, 2, 4), (1.0, 0.75, 0.45)) for b in (1, 4, 16) if d in degrees
    }
    return CapacityProblem(tuple(classes), THR, TPS, tuple(degrees), nodes, gpus, latency, **kw)


def cls(rate, out=100.0, slo=10.0, key=(0, 0)):
    return RequestClass(key, rate, 100.0, out, slo)


# ---------------------------------------------------------------------------- stage 1
def test_stage1_light_load_runs_everything_at_the_top_threshold():
    pb = problem([cls(1.0)])
    plan = solve_capacity(pb, 5)
    assert plan is not None and check_capacity_plan(pb, plan) == []
    assert plan.quality == pytest.approx(0.9, abs=1e-5)
    np.testing.assert_allclose(plan.steps_at[0], [0, 0, 100 / 1.25], atol=1e-3)
    assert sum(d * n for d, n in plan.counts.items()) == 8


def test_stage1_tight_slo_lowers_the_threshold():
    # 80 steps at 0.9 on the fastest step (TP-4, b=1: .0225 s) take 1.8 s > 1.5 s SLO.
    pb = problem([cls(0.5, slo=1.5)])
    plan = solve_capacity(pb, 5)
    assert plan is not None and check_capacity_plan(pb, plan) == []
    assert 0.5 < plan.quality < 0.9


def test_stage1_infeasible_returns_none_and_reconfigurator_falls_back(caplog):
    pb = problem([cls(1.0, slo=0.01)])
    assert solve_capacity(pb, 5) is None
    rec = Reconfigurator(ClusterConfig(nodes=1, gpus_per_node=4), default_profile())
    for i in range(5):
        rec.monitor.observe(float(i), 100, 64, 0.001)
    existing = [InstanceSpec("big", 4, 0, (0, 1, 2, 3), 131072)]
    with caplog.at_level(logging.WARNING):
        plan = rec.propose(5.0, existing)
    assert "falling back to all TP-1" in caplog.text
    assert plan.counts == {1: 4} and plan.reason.startswith("fallback")
    assert plan.steps[0].stop_first == ("big",) and all(s.launch.tp == 1 for s in plan.steps)


def test_stage1_check_catches_a_broken_plan():
    pb = problem([cls(1.0)])
    plan = solve_capacity(pb, 5)
    broken = type(plan)(**{**plan.__dict__, "steps_at": plan.steps_at * 0.5})
    assert any("tokens" in p for p in check_capacity_plan(pb, broken))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rates=hst.lists(hst.floats(0.1, 40.0), min_size=1, max_size=3),
    outs=hst.lists(hst.sampled_from([64.0, 128.0, 256.0]), min_size=3, max_size=3),
    slo=hst.floats(0.5, 20.0),
    nodes=hst.integers(1, 3),
)
def test_every_stage1_solution_satisfies_all_constraints(rates, outs, slo, nodes):
    pb = problem([cls(r, out=o, slo=slo, key=(i, 0)) for i, (r, o) in enumerate(zip(rates, outs))], nodes=nodes)
    plan = solve_capacity(pb, 5)
    if plan is not None:
        assert check_capacity_plan(pb, plan) == []


# ---------------------------------------------------------------------------- stage 2
def test_stage2_keeps_what_it_can():
    existing = [
        InstanceSpec("t1a", 1, 0, (0,), 1),
        InstanceSpec("t1b", 1, 0, (1,), 1),
        InstanceSpec("t2", 2, 0, (2, 3), 1),
    ]
    # Target: one TP-2 and two TP-1 -> everything survives.
    p = solve_placement(1, 4, [{1: 2, 2: 1}], existing, 5)
    assert sorted(p.keep) == ["t1a", "t1b", "t2"] and not p.launch
    # Target: two TP-2 -> keep t2, replace both TP-1s by one TP-2 on GPUs 0-1.
    p = solve_placement(1, 4, [{2: 2}], existing, 5)
    assert p.keep == ("t2",) and [s.gpus for s in p.launch] == [(0, 1)]
    assert check_placement(1, 4, {2: 2}, existing, p) == []


def _layout(draw, nodes, g):
    """A random valid running layout: aligned TP groups on each node."""
    specs = []
    for n in range(nodes):
        free = [True] * g
        for d in draw(hst.lists(hst.sampled_from([1, 2, 4]), max_size=4)):
            for start in range(0, g - d + 1, d):
                if all(free[start : start + d]):
                    free[start : start + d] = [False] * d
                    specs.append(InstanceSpec(f"e{len(specs)}", d, n, tuple(range(start, start + d)), 1))
                    break
    return specs


@settings(max_examples=25, deadline=None)
@given(hst.data())
def test_stage2_never_keeps_fewer_than_greedy(data):
    nodes, g = data.draw(hst.integers(1, 3)), 4
    existing = _layout(data.draw, nodes, g)
    pats = node_patterns((1, 2, 4), g, partial=False)
    node_counts = [
        {d: p.count(d) for d in (1, 2, 4) if p.count(d)}
        for p in (data.draw(hst.sampled_from(pats)) for _ in range(nodes))
    ]
    targets = {}
    for nc in node_counts:
        for d, k in nc.items():
            targets[d] = targets.get(d, 0) + k
    ilp = solve_placement(nodes, g, node_counts, existing, 5)
    greedy = greedy_placement(g, node_counts, existing)
    assert check_placement(nodes, g, targets, existing, ilp) == []
    assert check_placement(nodes, g, targets, existing, greedy) == []
    assert len(ilp.keep) >= len(greedy.keep)


# --------------------------------------------------------------------- monitor, plan
def test_monitor_buckets_and_rates_with_margin():
    mon = WorkloadMonitor(MonitorConfig(input_edges=(100,), output_edges=(200,), window_s=10, safety_margin=0.5))
    for t in range(10):
        mon.observe(float(t), 50, 300, 5.0)  # class (0, 1)
    mon.observe(9.0, 500, 100, 2.0)  # class (1, 0)
    mon.observe(-50.0, 500, 100, 2.0)  # outside the window
    classes = {c.key: c for c in mon.classes(10.0)}
    assert set(classes) == {(0, 1), (1, 0)}
    assert classes[(0, 1)].rate == pytest.approx(10 / 10 * 1.5)
    assert classes[(1, 0)].slo_s == 2.0 and classes[(1, 0)].prompt_tokens == 500


def test_plan_launches_on_free_gpus_first_and_executor_waits():
    existing = [InstanceSpec("old", 1, 0, (0,), 1)]
    p = solve_placement(1, 4, [{2: 2}], existing, 5)
    plan = build_plan(p, existing, ClusterConfig(nodes=1), {2: 2}, {}, None, None, "test")
    assert plan.steps[0].stop_first == () and plan.steps[1].stop_first == ("old",)
    ex = PlanExecutor(plan)
    first = plan.steps[0].launch.instance_id
    assert ex.poll(lambda i: True) == [Launch(plan.steps[0].launch)]
    assert ex.poll(lambda i: True) == []  # waits for ready
    ex.on_ready(first)
    assert ex.poll(lambda i: False) == [Drain("old")]  # busy: not stopped yet
    assert ex.poll(lambda i: True) == [Stop("old")]
    ex.on_stopped("old")
    assert ex.poll(lambda i: True) == [Launch(plan.steps[1].launch)]
    ex.on_ready(plan.steps[1].launch.instance_id)
    ex.poll(lambda i: True)
    assert ex.done


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(tp_degrees=(3,)), "power of two"),
        (dict(tp_degrees=(1, 2), max_batch_tokens={1: 10}), "lacks TP degrees"),
    ],
)
def test_cluster_config_errors_say_how_to_fix(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ClusterConfig(**kwargs)


# ----------------------------------------------------------- end to end with the scheduler
def test_reconfiguration_tick_reshapes_the_cluster_without_dropping_requests():
    cluster = ClusterConfig(nodes=1, gpus_per_node=4)
    # Per-token cost dominates: TP-4 runs a 64-token answer at 0.9 in ~0.33 s, TP-1 in ~0.68 s.
    profile = linear_profile({1: 4e-4, 2: 3e-4, 4: 1.8e-4}, base=0.001)
    be = RecordingBackend()
    sched = build_scheduler(
        be,
        "dilaserve",
        OneShotPredictor({0.5: 0.3, 0.7: 0.45, 0.9: 0.7}),
        profile=profile,
        cluster=cluster,
        reconfig=ReconfigConfig(min_improvement=0.1),
    )
    sched.start(static_layout(cluster, 1))
    for s in static_layout(cluster, 1):
        sched.handle(InstanceReady(0.0, s.instance_id))
    # A 0.45 s SLO: TP-1 must drop to ~0.7, one TP-4 keeps 0.9 (>= 10% better).
    reqs = [f"r{i}" for i in range(2)]
    for i, rid in enumerate(reqs):
        sched.handle(RequestArrived(0.5 * i, make_request(rid, arrival=0.5 * i, slo=0.45)))
    sched.handle(ReconfigTick(1.0))
    assert sched.executor is not None, "expected a plan"
    plan = sched.executor.plan
    assert plan.counts == {4: 1} and len(plan.stops) == 4
    # Walk the plan: whatever is stopped must have been drained of requests first.
    for _ in range(20):
        for iid in list(be.stopped):
            if iid in sched.pool.slot_of:
                slot = sched.pool.slot_of[iid]
                assert not sched.pool.members[slot]
                sched.handle(InstanceStopped(2.0, iid))
        for spec in list(be.launched):
            slot = sched.pool.slot_of.get(spec.instance_id)
            if slot is not None and not sched.pool.ready[slot]:
                sched.handle(InstanceReady(2.0, spec.instance_id))
        # Instances being drained finish their requests' steps (requests leave or finish).
        for iid in [i for i in sched.pool.slot_of if sched.pool.busy[sched.pool.slot_of[i]]]:
            batch = be.last_batch(iid)
            for a in batch:
                st = a.state
                st.apply_step(
                    np.flatnonzero(st.response == 1)[:32],
                    np.full(min(32, int((st.response == 1).sum())), 7),
                    a.threshold,
                    st.next_kind,
                    np.zeros(5),
                )
            sched.handle(StepFinished(3.0, iid, tuple(a.state for a in batch)))
        if sched.executor.done:
            break
    assert sched.executor.done and sorted(be.stopped) == sorted(plan.stops)
    finished = {o.request_id for o in sched.outcomes if o.status == "finished"}
    assert finished | set(sched.requests) == set(reqs)  # nothing dropped
    counts = {}
    for s in sched.pool.active_specs():
        counts[s.tp] = counts.get(s.tp, 0) + 1
    assert all(counts.get(d, 0) >= n for d, n in plan.counts.items())


def test_solving_prints_nothing_on_stdout():
    """Benchmarks and experiments end with one JSON line on stdout; the solver must not add to it."""
    import subprocess
    import sys

    code = (
        "import pulp\n"
        "from dilaserve.reconfig.solver import solve\n"
        "p = pulp.LpProblem('t', pulp.LpMinimize)\n"
        "x = pulp.LpVariable('x', 0, 10, cat='Integer')\n"
        "p += x\n"
        "p += x >= 2\n"
        "print(solve(p, 5.0).status, int(x.value()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == "optimal 2\n"


# ------------------------------------------------------------------ block diffusion
def test_stage1_block_causal_prefill_is_the_only_fixed_step():
    classes = [RequestClass((0, 0), 1.0, 100.0, 96.0, 10.0)]
    lat = {(1, b): 0.02 for b in (1, 4, 16)}
    rec = {(1, b): 0.05 for b in (1, 4, 16)}
    bi = problem(classes, degrees=(1,), latency=lat, recompute_latency=rec, block_length=32)
    bc = problem(classes, degrees=(1,), latency=lat, recompute_latency=rec, block_length=32, block_causal=True)
    assert bi.recompute_steps().tolist() == [3.0]  # one per block of 96 tokens
    assert bc.recompute_steps().tolist() == [1.0]  # the prefill alone
    plan = solve_capacity(bc, time_limit_s=5.0)
    assert plan is not None and not check_capacity_plan(bc, plan)
    assert plan.recompute_on.sum() == pytest.approx(1.0)
    # at 0.9 (1.25 tokens per step) a request takes 76.8 steps: 75.8 block steps and the prefill
    steps = 96 / 1.25
    assert capacity_rps(bc, {1: 8}, 0.9) == pytest.approx(8 * 16 / ((steps - 1) * 0.02 + 0.05))


def test_reconfigurator_prices_the_block_causal_prefill_and_appends():
    profile = linear_profile({1: 1e-4})
    cfg = ReconfigConfig(tokens_per_step={0.5: 4.0, 0.9: 2.0}, block_length=32, block_causal=True)
    rc = Reconfigurator(ClusterConfig(nodes=1, gpus_per_node=1, tp_degrees=(1,)), profile, cfg)
    pb = rc.problem([RequestClass((0, 0), 1.0, 100.0, 96.0, 10.0)])
    assert pb.block_causal and pb.recompute_steps().tolist() == [1.0]
    # the prefill runs prompt + first block; a block step feeds the block plus the appends'
    # share at the lowest threshold (2 appends over 96 / 4 - 1 = 23 cache steps)
    assert pb.recompute_latency[1, 1] == pytest.approx(profile.latency(1, 132))
    assert pb.latency[1, 1] == pytest.approx(profile.latency(1, 32 + 64 / 23, StepKind.CACHE))


def test_executor_launches_at_once_on_free_gpus_and_takes_nothing_more_offline_until_they_are_up():
    """Back from one TP-4 to TP-1 and on to a second node: the TP-4 drains once and its four
    TP-1 instances launch together; the next step, which stops an instance, waits until
    they are all ready."""
    new = [InstanceSpec(f"n{g}", 1, 0, (g,), 4096) for g in range(4)]
    other = InstanceSpec("m0", 2, 1, (0, 1), 4096)
    steps = (
        PlanStep(new[0], stop_first=("big",)),
        *(PlanStep(s) for s in new[1:]),
        PlanStep(other, stop_first=("old-1",)),
    )
    plan = ReconfigPlan(
        steps, keep=(), counts={1: 4, 2: 1}, batch={}, objective=None, current_objective=None, reason="t"
    )
    ex = PlanExecutor(plan)
    assert ex.poll(lambda i: False) == [Drain("big")]
    actions = ex.poll(lambda i: True)
    assert actions == [Stop("big")]
    ex.on_stopped("big")
    assert ex.poll(lambda i: True) == [Launch(s) for s in new]  # all four at once
    assert ex.poll(lambda i: True) == [] and not ex.done  # "old-1" stays up meanwhile
    for s in new[:3]:
        ex.on_ready(s.instance_id)
    assert ex.poll(lambda i: True) == []
    ex.on_ready(new[3].instance_id)
    assert ex.poll(lambda i: True) == [Drain("old-1"), Stop("old-1")]
    ex.on_stopped("old-1")
    assert ex.poll(lambda i: True) == [Launch(other)] and not ex.done
    ex.on_ready("m0")
    assert ex.done


def test_an_offline_budget_lets_steps_on_other_nodes_drain_together():
    """With room for eight GPUs offline, node 0's and node 1's swaps (four GPUs each) drain
    and launch together; node 2's waits until a launch is ready, and launches keep their
    order even when a later step's instances stop first."""
    old = {f"old-{n}": 4 for n in range(3)}
    new = [InstanceSpec(f"tp4-{n}", 4, n, (0, 1, 2, 3), 4096) for n in range(3)]
    steps = tuple(PlanStep(new[n], stop_first=(f"old-{n}",)) for n in range(3))
    plan = ReconfigPlan(steps, keep=(), counts={4: 3}, batch={}, objective=None, current_objective=None, reason="t")
    ex = PlanExecutor(plan, max_offline_gpus=8, gpus_of=old)
    assert ex.poll(lambda i: False) == [Drain("old-0"), Drain("old-1")]
    assert ex.poll(lambda i: i == "old-1") == [Stop("old-1")]
    ex.on_stopped("old-1")
    assert ex.poll(lambda i: i == "old-1") == []  # old-1's launch waits for old-0's, in plan order
    assert ex.poll(lambda i: True) == [Stop("old-0")]
    ex.on_stopped("old-0")
    assert ex.poll(lambda i: True) == [Launch(new[0]), Launch(new[1])]
    ex.on_ready("tp4-0")
    assert ex.poll(lambda i: False) == [Drain("old-2")]  # four GPUs offline now: room for four more
    assert ex.poll(lambda i: True) == [Stop("old-2")]
    ex.on_stopped("old-2")
    assert ex.poll(lambda i: True) == [Launch(new[2])]
    ex.on_ready("tp4-1")
    ex.on_ready("tp4-2")
    assert ex.done


def test_one_step_always_starts_even_past_the_offline_budget():
    steps = (PlanStep(InstanceSpec("big", 4, 0, (0, 1, 2, 3), 4096), stop_first=("a", "b")),)
    plan = ReconfigPlan(steps, keep=(), counts={4: 1}, batch={}, objective=None, current_objective=None, reason="t")
    ex = PlanExecutor(plan, max_offline_gpus=1, gpus_of={"a": 2, "b": 2})
    assert ex.poll(lambda i: False) == [Drain("a"), Drain("b")]
