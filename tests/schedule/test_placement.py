"""Placement (dilaserve/schedule/placement.py): the instance an arrival goes to, deferral
while no instance has room, and the thresholds of the requests placed."""

import logging

from dilaserve.cluster.base import InstanceReady
from tests.builders.schedule import arrive, cluster, finish_step, spec
from tests.control.builders import make_request


def test_instance_selection_minimises_predicted_step_latency():
    # LP1(n) = .01 + 1e-4 n, LP2(n) = .01 + .75e-4 n.
    sched, be = cluster(specs=[spec("a", 1), spec("b", 2)])
    # 200 tokens, both empty: TP-1 .030 vs TP-2 .025 -> b
    assert arrive(sched, make_request("r0", prompt=136)).instance == "b"
    # 100 tokens: TP-1 LP(100) = .020 vs TP-2 LP(300) = .0325 -> a
    assert arrive(sched, make_request("r1")).instance == "a"
    # 100 tokens: TP-1 LP(200) = .030 vs .0325 -> a
    assert arrive(sched, make_request("r2")).instance == "a"
    # 100 tokens: TP-1 LP(300) = .040 vs .0325 -> b
    assert arrive(sched, make_request("r3")).instance == "b"
    assert sched.pool.tokens[sched.pool.slot_of["a"]] == 200


def test_deferral_when_no_instance_has_room_then_placement():
    sched, be = cluster(specs=[spec("a", max_batch=300)])
    arrive(sched, make_request("r0", prompt=168, gen=32))  # 200 tokens, one block
    r1 = arrive(sched, make_request("r1", prompt=168, gen=32))  # 400 > 300: deferred
    assert r1.instance is None and sched.deferred == [r1]
    assert [a.state.request_id for a in be.last_batch("a")] == ["r0"]
    finish_step(sched, be, "a", 1.0, k=32)  # r0 commits everything
    assert sched.outcomes[-1].request_id == "r0" and sched.outcomes[-1].status == "finished"
    assert r1.instance == "a" and not sched.deferred
    assert [a.state.request_id for a in be.last_batch("a")] == ["r1"]


def test_thresholds_follow_the_slo():
    sched, be = cluster(specs=[spec("a")])
    loose = arrive(sched, make_request("loose", slo=100.0))
    tight = arrive(sched, make_request("tight", slo=0.5))
    thr = sched.controller.threshold
    assert thr(loose) == 0.9 and thr(tight) < 0.9


def test_empty_cluster_defers_then_places(caplog):
    sched, be = cluster(specs=[])
    with caplog.at_level(logging.WARNING):
        r = arrive(sched, make_request("r0"))
    assert "no instances" in caplog.text and sched.deferred == [r]
    sched.start([spec("a")])
    assert r.instance is None  # launched but not ready yet
    sched.handle(InstanceReady(1.0, "a"))
    assert r.instance == "a" and be.last_batch("a")[0].state.request_id == "r0"


def test_instance_missing_from_profile_gets_no_requests(caplog):
    with caplog.at_level(logging.ERROR):
        sched, be = cluster(specs=[spec("odd", tp=8)])
    assert "covers TP [1, 2, 4]" in caplog.text
    r = arrive(sched, make_request("r0"))
    assert r.instance is None and sched.deferred == [r]
