"""The persistent K/V pool, pooled cache steps (window, padding rows, gather), a full pool,
the capture-safe step (``torch.compile(fullgraph=True)``) and the unmask rule on the device."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dilaserve.engine import DenoisingEngine, StepKind, cache_step, select_commits
from dilaserve.engine.commit import commit_mask
from dilaserve.engine.config import EngineConfig, batch_bucket, context_bucket
from dilaserve.engine.kv_pool import KVPool, PoolFull
from dilaserve.model.adapters import load_diffusion_lm
from dilaserve.model.make_tiny import TinyShape, make_tiny
from tests.conftest import TINY_BD_BLOCK

PROMPTS = ["list : a b c", "arith : + 2 - 1 : three five", "pairs : x y"]


def _decode(engine, states, thresholds):
    while not all(s.finished for s in states):
        active = [i for i, s in enumerate(states) if not s.finished]
        for r in engine.step([states[i] for i in active], [thresholds[i] for i in active]):
            assert r.error is None, r.error
    return [(s.response.tolist(), s.steps_done, s.conf_stats.tolist()) for s in states]


def _alone(lm, prompt, gen, thr, use_cache=True):
    engine = DenoisingEngine(lm)
    return _decode(engine, [engine.new_request(prompt, gen, use_cache=use_cache)], [thr])[0]


@pytest.fixture(scope="module")
def lm(tiny_checkpoint):
    return load_diffusion_lm(tiny_checkpoint)


def test_buckets_pad_batches_and_contexts_to_few_shapes():
    assert [batch_bucket(n) for n in (1, 2, 3, 5, 17, 33, 64, 65, 130)] == [1, 2, 4, 8, 32, 64, 64, 128, 192]
    assert [context_bucket(n, 32, 256) for n in (1, 32, 33, 250)] == [32, 32, 64, 256]


def test_the_pool_is_sized_from_its_budget_and_says_how_to_fix_a_bad_one(lm):
    per_slot = 2 * 2 * 2 * 256 * 16 * 4  # layers x (K, V) x heads x slot tokens x head width x float32
    pool = KVPool.for_model(lm.model, lm.max_context, EngineConfig(kv_cache_bytes=5 * per_slot + 1))
    assert (pool.max_slots, pool.slot_tokens) == (5, 256)
    assert pool.capacity <= 4, "off CUDA the pool grows on demand"
    with pytest.raises(PoolFull, match="raise the budget"):
        KVPool.for_model(lm.model, lm.max_context, EngineConfig(kv_cache_bytes=per_slot - 1))
    with pytest.raises(ValueError, match="--gpu-memory-utilization"):
        EngineConfig(gpu_memory_utilization=1.5)
    with pytest.raises(ValueError, match="--slot-tokens"):
        EngineConfig(slot_tokens=0)


def test_the_slots_in_use_stay_the_first_ones_and_a_moved_request_keeps_its_cache(lm):
    pool = KVPool.for_model(lm.model, lm.max_context, EngineConfig(kv_cache_bytes=64 << 20))
    assert [pool.reserve(f"r{i}") for i in range(6)] == list(range(6)) and pool.capacity >= 6
    last = torch.randn(pool.kv[:, :, 0, :, :10].shape)
    pool.store("r5", last)
    pool.release("r1")  # r5 moves into slot 1, with its K/V
    assert pool.slot("r5") == 1 and pool.reserve("new") == 5 and pool.reserve("r0") == 0
    torch.testing.assert_close(pool.view("r5"), last, atol=0, rtol=0)
    assert sorted(pool.slot(r) for r in pool.requests()) == list(range(6))


def test_a_full_pool_refuses_clearly_and_its_requests_still_decode_as_alone(lm):
    gen, thr = 32, [math.inf, math.inf, 1e-3]  # the third commits its whole block at once
    per_slot = 2 * 2 * 2 * 256 * 16 * 4
    engine = DenoisingEngine(lm, EngineConfig(kv_cache_bytes=2 * per_slot))
    states = [engine.new_request(p, gen) for p in PROMPTS]
    engine.reserve(states[0])
    engine.reserve(states[1])
    assert not engine.can_admit()
    with pytest.raises(PoolFull, match="wait for one to free"):
        engine.reserve(states[2])
    assert [r.kind for r in engine.step(states, thr)] == [StepKind.RECOMPUTE] * 3
    assert engine.pool_misses == 1 and states[2].finished, "no slot: it stepped without keeping its K/V"
    got = _decode(engine, states, thr)
    want = [_alone(lm, p, gen, t) for p, t in zip(PROMPTS[:2], thr)] + [_alone(lm, PROMPTS[2], gen, thr[2], False)]
    assert got == want
    assert engine.can_admit(2) and not engine.cached_requests()


def test_a_step_over_a_window_with_padding_rows_leaves_other_slots_untouched(lm):
    engine = DenoisingEngine(lm)
    states = [engine.new_request(p, 64) for p in PROMPTS]
    engine.step(states, [math.inf] * 3)  # slots 0, 1, 2
    a, b, c = sorted(states, key=lambda s: engine.pool.slot(s.request_id))
    held = engine.cache_of(b.request_id)
    plan = cache_step.plan([a, c], engine.pool, 32, captured=False)
    assert plan.window and plan.n_rows == 3 and plan.rows == [0, 2]  # b's slot is a padding row
    captured = cache_step.plan([a, c], engine.pool, 32, captured=True)
    assert captured.window and captured.n_rows == 4  # the bucket of slot 2: rows 1 and 3 pad
    engine.step([a, c], [math.inf] * 2)
    torch.testing.assert_close(engine.cache_of(b.request_id), held, atol=0, rtol=0)
    # and they decode as they would alone, whoever sits beside them
    got = _decode(engine, states, [math.inf] * 3)
    assert got == [_alone(lm, p, 64, math.inf) for p in PROMPTS]


def test_a_sparse_window_gathers_and_writes_back_as_the_window_would(lm):
    engine = DenoisingEngine(lm)
    a, st = engine.new_request(PROMPTS[0], 64), engine.new_request(PROMPTS[2], 64)
    engine.step([a], [0.9])  # slot 0
    for f in [engine.new_request(PROMPTS[1], 32) for _ in range(5)]:
        engine.reserve(f)  # slots 1 .. 5
    engine.step([st], [0.9])  # slot 6: a window of 7 rows for two requests is too sparse
    plan = cache_step.plan([a, st], engine.pool, 32, captured=False)
    assert not plan.window and plan.slots == [0, 6]
    assert not cache_step.plan([a, st], engine.pool, 32, captured=True).window  # 8 rows for 2: gathered too
    assert _decode(engine, [a, st], [0.9, 0.9]) == [_alone(lm, PROMPTS[0], 64, 0.9), _alone(lm, PROMPTS[2], 64, 0.9)]


def test_the_unmask_rule_on_the_device_equals_the_numpy_rule():
    rng = np.random.default_rng(0)
    conf = rng.random((64, 12)).astype(np.float32)
    conf[:8] = np.float32(0.9)  # exactly at the threshold, as float32 rounds it
    counts = rng.integers(0, 13, 64)
    thresholds = rng.choice([0.5, 0.9, 0.99, math.inf], 64)
    valid = np.arange(12)[None, :] < counts[:, None]
    got = commit_mask(torch.from_numpy(conf), torch.from_numpy(valid), torch.from_numpy(thresholds)).numpy()
    for b in range(64):
        want = select_commits(conf[b], valid[b], thresholds[b])
        assert np.flatnonzero(got[b]).tolist() == want.tolist(), b


@pytest.fixture(scope="module")
def natives(tmp_path_factory):
    shape = TinyShape(layers=2, hidden=32, heads=4, kv_heads=2, intermediate=64)
    return {arch: make_tiny(arch, tmp_path_factory.mktemp(arch), shape, seed=5) for arch in ("llada", "dream")}


@pytest.mark.parametrize("arch", ["llada", "dream"])
def test_a_native_request_migrated_mid_batch_decodes_as_alone(natives, arch):
    """LLaDA and Dream (grouped K/V heads, the lead token) in the pool: a batch whose requests
    finish at different times (so slots move), one of them migrated to another engine right
    before a recompute step, each decodes as it would alone on a fresh engine."""
    lm = load_diffusion_lm(natives[arch])
    prompts, gens, thr = [[5, 6, 7], [9, 10, 11, 12, 13], [20, 21]], [64, 96, 32], [math.inf, 1.0, 0.05]
    src, dst = DenoisingEngine(lm), DenoisingEngine(lm)
    states = [src.new_request(p, g) for p, g in zip(prompts, gens)]
    where = [src] * 3
    while not all(s.finished for s in states):
        for engine in (src, dst):
            active = [i for i, s in enumerate(states) if not s.finished and where[i] is engine]
            if active:
                engine.step([states[i] for i in active], [thr[i] for i in active])
        moved = states[1]
        if where[1] is src and moved.block_index == 1 and moved.next_kind is StepKind.RECOMPUTE:
            src.release(moved.request_id)
            states[1], where[1] = dst.restore(moved.to_bytes()), dst
    assert where[1] is dst and not src.cached_requests() and not dst.cached_requests()
    for p, g, t, s in zip(prompts, gens, thr, states):
        engine = DenoisingEngine(lm)
        want = _decode(engine, [engine.new_request(p, g)], [t])[0]
        assert (s.response.tolist(), s.steps_done) == want[:2]


@pytest.fixture(scope="module")
def compiled_models(tiny_checkpoint, tiny_bd_checkpoint, natives):
    return {
        "dila": (tiny_checkpoint, 32),
        "block-causal": (tiny_bd_checkpoint, TINY_BD_BLOCK),
        "dream": (natives["dream"], 32),
    }


@pytest.mark.parametrize("model", ["dila", "block-causal", "dream"])
def test_the_cache_step_compiles_with_fullgraph_and_gives_the_eager_logits(compiled_models, model):
    """``fullgraph=True`` fails on a graph break: a host synchronisation (``.item()``,
    ``int(tensor)``) or a shape that depends on data, exactly what CUDA graph capture cannot
    take. The ``aot_eager`` backend traces and functionalises the step as inductor would but
    skips code generation (minutes of C++ compilation on a small CPU)."""
    path, block = compiled_models[model]
    engine = DenoisingEngine(load_diffusion_lm(path))
    states = [engine.new_request([5, 6, 7, 8], 2 * block, block), engine.new_request([9, 10], 2 * block, block)]
    engine.step(states, [math.inf, math.inf])
    engine.step(states[1:], [math.inf])  # different canvases in the two slots
    rows = np.stack([np.flatnonzero(s.response[s.block_slice] == s.mask_id)[:4] for s in states])
    plan = cache_step.plan(states, engine.pool, block, captured=True)
    host, layout = cache_step.build_inputs(states, rows, engine.pool, engine.lm, plan, static=True)
    buf = cache_step.to_device(host, engine.lm.device)
    past = engine.pool.window(plan.first, plan.n_rows, plan.tokens)
    before = engine.pool.kv.clone()
    want = cache_step.packed_forward(engine.lm, past, buf, layout)
    eager_pool = engine.pool.kv.clone()
    engine.pool.kv.copy_(before)
    torch._dynamo.reset()
    got = torch.compile(cache_step.packed_forward, fullgraph=True, backend="aot_eager")(engine.lm, past, buf, layout)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(engine.pool.kv, eager_pool, atol=1e-6, rtol=1e-6)  # the same fresh K/V written

    def synced(t: torch.Tensor) -> torch.Tensor:  # the position check the forward used to make
        if int(t.max()) >= 1000:
            raise ValueError("position outside the context")
        return t + 1

    with pytest.raises(Exception, match="data-dependent"):  # the test can fail: a host sync is caught
        torch.compile(synced, fullgraph=True, backend="aot_eager")(buf)
