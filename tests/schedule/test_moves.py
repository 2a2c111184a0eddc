"""Migration (dilaserve/schedule/moves.py): a just-stepped request moves only at a legal
migration point, and only under a policy that balances by moving."""

from dilaserve.cluster.base import InstanceReady
from tests.builders.schedule import arrive, cluster, finish_step, spec
from tests.control.builders import make_request


def _one_loaded(policy, use_cache, k=1):
    sched, be = cluster(policy, specs=[spec("a")])
    r0 = arrive(sched, make_request("r0", use_cache=use_cache))
    arrive(sched, make_request("r1", use_cache=use_cache))  # joins a while it steps r0
    sched.start([spec("b")])
    sched.handle(InstanceReady(0.0, "b"))
    finish_step(sched, be, "a", 0.1, k=k)  # r0 has stepped: a 200 tokens, b 0
    return sched, be, r0


def test_with_caching_no_migration_before_a_cache_step():
    sched, be, r0 = _one_loaded("dilaserve-no-reconfig", use_cache=True)
    assert r0.instance == "a" and not be.migrations


def test_with_caching_migration_right_before_a_recompute_step():
    sched, be, r0 = _one_loaded("dilaserve-no-reconfig", use_cache=True, k=32)  # block 0 done
    assert r0.instance == "b" and be.migrations == [("r0", "a", "b")]
    assert [a.state.request_id for a in be.last_batch("b")] == ["r0"]


def test_without_caching_migration_at_any_step():
    sched, be, r0 = _one_loaded("dilaserve-no-reconfig", use_cache=False)
    assert r0.instance == "b"


def test_migrate_any_step_ablation_forces_a_recompute_on_the_destination():
    sched, be, r0 = _one_loaded("dilaserve-paper-migrate-any-step", use_cache=True)
    assert r0.instance == "b"
    assert r0.state.next_kind.value == "recompute"


def test_infaas_least_tokens_fixed_threshold_no_migration():
    sched, be, r0 = _one_loaded("infaas", use_cache=False)
    assert r0.instance == "a" and not be.migrations
    assert {a.threshold for _, batch in be.steps for a in batch} == {0.9}


def test_llumnix_balances_load_by_migration():
    sched, be, r0 = _one_loaded("llumnix", use_cache=False)
    assert r0.instance == "b"
    assert {a.threshold for _, batch in be.steps for a in batch} == {0.9}
