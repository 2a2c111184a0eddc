"""Migration of block-causal requests: any step, priced by the prefill the destination runs."""

import pytest

from dilaserve.cluster.base import InstanceReady
from dilaserve.schedule.migration.cost import move_pays, rebuild_seconds, steps_left
from dilaserve.schedule.migration_points import migration_points
from tests.builders.schedule import arrive, cluster, finish_step, spec
from tests.control.builders import commit, default_profile, make_request


def test_recompute_point_lets_a_block_causal_request_move_at_any_step_priced():
    point = migration_points.get("recompute")()
    bc, bi = make_request("a", block_causal=True), make_request("b")
    for r in (bc, bi):
        commit(r, 1)  # a cache step comes next
    assert point.allows(bc) and point.priced(bc)
    assert not point.allows(bi)  # the dual cache moves only before a recompute step
    fresh = make_request("c", block_causal=True)  # before its prefill: free
    assert point.allows(fresh) and not point.priced(fresh)


def test_a_move_must_repay_the_destinations_prefill():
    p = default_profile()  # LP(n) = 0.01 + 1e-4 n on TP-1, both step kinds
    short = make_request("a", prompt=36, block_causal=True)
    commit(short, 1)  # 63 masked tokens left at 1 token per step: 63 steps
    assert steps_left(short) == 63
    # the prefill over 36 + 32 tokens replaces a cache step over 32: 0.0036 s
    assert rebuild_seconds(p, 1, short) == pytest.approx(1e-4 * (68 - 32))
    # from a 2-request batch to an empty instance: 63 x (LP[64] - LP[32]) = 0.2016 s saved
    assert move_pays(p, short, (1, 2), (1, 0))
    long = make_request("b", prompt=3000, block_causal=True)
    commit(long, 1)
    # the prefill over 3032 tokens costs 0.3 s, more than the 0.2016 s the move saves
    assert not move_pays(p, long, (1, 2), (1, 0))


@pytest.mark.parametrize("prompt, moves", [(36, True), (3000, False)])
def test_scheduler_moves_a_block_causal_request_only_when_it_pays(prompt, moves):
    sched, be = cluster("dilaserve-no-reconfig", specs=[spec("a", max_batch=10_000)])
    r0 = arrive(sched, make_request("r0", prompt=prompt, block_causal=True))
    arrive(sched, make_request("r1", prompt=prompt, block_causal=True))
    sched.start([spec("b", max_batch=10_000)])
    sched.handle(InstanceReady(0.0, "b"))
    finish_step(sched, be, "a", 0.1, k=1)  # r0 prefilled: its next step is a cache step
    assert (r0.instance == "b") is moves
    if moves:  # the destination rebuilds the exact cache with one prefill
        assert r0.state.next_kind.value == "recompute" and r0.state.recompute_left_lower_bound == 1
