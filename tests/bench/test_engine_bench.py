from dilaserve.bench.engine import step_costs


def test_step_costs_measure_each_kind_and_leave_no_cache(tiny_engine):
    prompts, lengths = ["list : c a f", "pairs : k q", "list : z"], [64, 32, 32]
    costs = step_costs(tiny_engine, prompts, lengths, batch_sizes=(1, 3), cache_steps=2)
    for kind in ("recompute", "cache"):
        assert set(costs[kind]) == {"1", "3"} and all(v > 0 for v in costs[kind].values())
    assert not tiny_engine._kv  # every measured request released its cache

