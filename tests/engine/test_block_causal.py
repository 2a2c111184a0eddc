"""Block-causal (block-diffusion) requests: the exact cache, the prefill, the append, migration."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from dilaserve.engine import DenoisingEngine, StepKind
from dilaserve.engine.cache_blob import cache_from_bytes
from dilaserve.model.adapters import DiffusionLM, load_diffusion_lm
from tests.conftest import TINY_BD_BLOCK

BLOCK = TINY_BD_BLOCK
#: prompt, canvas, threshold, step at which the request joins the batch
REQUESTS = [
    ("list : a b c", 3 * BLOCK, 0.9, 0),
    ("arith : + 2 - 1 : three five", 2 * BLOCK, 0.06, 3),
    ("pairs : x y", 3 * BLOCK, 0.04, 5),
]


@pytest.fixture(scope="module")
def bd_engine(tiny_bd_checkpoint):
    return DenoisingEngine(load_diffusion_lm(tiny_bd_checkpoint))


def _cached_tokens(engine, request_id: str) -> int:
    """Tokens of K/V ``engine`` holds for a request, read from the cache it would ship."""
    return cache_from_bytes(engine.export_cache(request_id)).shape[3]


def _states(engine):
    return [engine.new_request(p, g, BLOCK) for p, g, _, _ in REQUESTS]


def _decode_staggered(engine, states, thresholds, joins):
    """Step the requests together, each joining at its own step, until all finish."""
    t, kinds = 0, {s.request_id: [] for s in states}
    while not all(s.finished for s in states):
        active = [i for i, s in enumerate(states) if joins[i] <= t and not s.finished]
        if active:
            results = engine.step([states[i] for i in active], [thresholds[i] for i in active])
            for r in results:
                assert r.error is None, r.error
                kinds[r.request_id].append(r.kind)
        t += 1
    return [(s.response.tolist(), s.steps_done) for s in states], kinds


def test_requests_of_a_block_causal_model_are_block_causal_and_prefill_once(bd_engine):
    st = bd_engine.new_request("list : a b c", 3 * BLOCK, BLOCK)
    assert st.block_causal
    kinds = []
    while not st.finished:
        kinds.append(bd_engine.step([st], [0.9])[0].kind)
        if not st.finished:  # the cache holds exactly the prompt and the finished blocks
            held = _cached_tokens(bd_engine, st.request_id)
            assert held == st.prompt_len + st.block_start - (BLOCK if st.append_pending else 0)
    assert kinds[0] is StepKind.RECOMPUTE and set(kinds[1:]) == {StepKind.CACHE}
    assert st.recompute_steps_done == 1 and st.block_index > 0
    with pytest.raises(ValueError, match="blocks of 8 tokens"):
        bd_engine.new_request("list : a", 64, 32)


def test_mixed_batch_equals_each_request_decoded_alone(bd_engine):
    thresholds, joins = [r[2] for r in REQUESTS], [r[3] for r in REQUESTS]
    together, kinds = _decode_staggered(bd_engine, _states(bd_engine), thresholds, joins)
    alone = [_decode_staggered(bd_engine, [st], [thr], [0])[0][0] for st, thr in zip(_states(bd_engine), thresholds)]
    assert together == alone
    # the batch really mixed prompt lengths, blocks and appends: one prefill each, then cache steps
    assert all(k[0] is StepKind.RECOMPUTE and StepKind.RECOMPUTE not in k[1:] for k in kinds.values())


@dataclass
class _Pass:
    """One forward pass the engine ran: each row's prompt length, the canvas positions its
    logits are for, those logits, and whether the row also fed its finished block (an append)."""

    prompt_lengths: list[int]
    positions: torch.Tensor
    logits: torch.Tensor
    appends: bool


@dataclass
class _RecordingLM(DiffusionLM):
    """The model, recording every pass the engine runs through it (prefills and cache steps)."""

    passes: list[_Pass] = field(default_factory=list)

    def full(self, ids, attn, return_kv, prompt_lengths=None, logit_positions=None):
        logits, kv = super().full(ids, attn, return_kv, prompt_lengths, logit_positions)
        self.passes.append(_Pass(prompt_lengths.tolist(), logit_positions, logits.clone(), False))
        return logits, kv

    def block(self, ids, positions, past_kv, past_mask, logit_positions=None, prompt_lengths=None, **kw):
        logits = super().block(ids, positions, past_kv, past_mask, logit_positions, prompt_lengths, **kw)
        # a pooled step's rows are pool slots: only the rows that write are a request's
        real = kw["write_rows"] if kw.get("write_rows") is not None else torch.ones(ids.shape[0], dtype=torch.bool)
        where = positions.gather(1, self.lead + logit_positions)  # fed rows -> canvas positions
        fed = ids.shape[1] - self.lead
        self.passes.append(
            _Pass(prompt_lengths[real].tolist(), where[real], logits[real].clone(), fed > self.block_length)
        )
        return logits


def test_every_step_gives_the_logits_of_a_full_block_causal_forward(tiny_bd_checkpoint):
    """The block-causal cache is exact: every pass of a mixed batch with appends, prefill or
    cache step, gives each request the logits a full forward over its context gives."""
    lm = _RecordingLM(**vars(load_diffusion_lm(tiny_bd_checkpoint)))
    engine = DenoisingEngine(lm)
    states = _states(engine)
    assert len({s.prompt_len for s in states}) == len(states)  # a pass's rows name their request
    thresholds = [r[2] for r in REQUESTS]
    checked = appends = 0
    while not all(s.finished for s in states):
        active = [i for i, s in enumerate(states) if not s.finished]
        # copies of the states before the step: the reference forward sees what the step saw
        before = {states[i].prompt_len: type(states[i]).from_bytes(states[i].to_bytes()) for i in active}
        lm.passes.clear()
        engine.step([states[i] for i in active], [thresholds[i] for i in active])
        for p in lm.passes:
            for row, plen in enumerate(p.prompt_lengths):
                st = before[plen]
                ctx = np.concatenate((st.prompt_ids, st.response[: st.block_start + BLOCK]))
                with torch.no_grad():
                    full = lm.model(torch.from_numpy(ctx)[None], prompt_lengths=torch.tensor([plen])).logits[0]
                torch.testing.assert_close(p.logits[row], full[p.positions[row]], atol=1e-5, rtol=1e-5)
                checked += 1
                appends += int(p.appends)
    assert checked == sum(s.steps_done for s in states) and appends >= 2


@pytest.mark.parametrize("ship", [False, True])
@pytest.mark.parametrize("cut", [3, BLOCK, BLOCK + 1])
def test_migrated_request_continues_identically(tiny_bd_checkpoint, bd_engine, cut, ship):
    """``cut`` steps on one engine, the rest on another, with the cache shipped or rebuilt;
    a one-token-per-step request is at step ``BLOCK`` just past its first block, with the
    append still pending."""
    reference = bd_engine.new_request("pairs : x y", 3 * BLOCK, BLOCK)
    _decode_staggered(bd_engine, [reference], [1.0], [0])
    moved = bd_engine.new_request("pairs : x y", 3 * BLOCK, BLOCK)
    for _ in range(cut):
        bd_engine.step([moved], [1.0])
    assert moved.append_pending == (cut == BLOCK)
    blob, cache = moved.to_bytes(), bd_engine.export_cache(moved.request_id) if ship else None
    bd_engine.release(moved.request_id)
    other = DenoisingEngine(load_diffusion_lm(tiny_bd_checkpoint))
    moved = other.restore(blob, cache)
    first = other.step([moved], [1.0])[0]
    # shipped: the cache goes on as it was; rebuilt: one prefill of prompt + finished blocks
    assert first.kind is (StepKind.CACHE if ship else StepKind.RECOMPUTE)
    _decode_staggered(other, [moved], [1.0], [0])
    assert moved.response.tolist() == reference.response.tolist()
    assert moved.steps_done == reference.steps_done and moved.recompute_steps_done == (1 if ship else 2)


def test_a_cache_of_other_blocks_is_replaced_by_a_prefill(bd_engine):
    st = bd_engine.new_request("list : a b c", 3 * BLOCK, BLOCK)
    bd_engine.step([st], [1.0])
    old = bd_engine.export_cache(st.request_id)  # the prompt only
    while st.block_index == 0:
        bd_engine.step([st], [1.0])
    bd_engine.step([st], [1.0])  # appends block 0
    current = bd_engine.export_cache(st.request_id)  # the prompt and block 0
    bd_engine.release(st.request_id)
    assert bd_engine.import_cache(st.request_id, old)  # e.g. left from an earlier visit
    assert bd_engine.step([st], [1.0])[0].kind is StepKind.RECOMPUTE
    assert _cached_tokens(bd_engine, st.request_id) == st.prompt_len + BLOCK
    # a shipped cache replaces a shorter (stale) one, never one at least as long
    assert not bd_engine.import_cache(st.request_id, old)
    bd_engine.release(st.request_id)
    assert bd_engine.import_cache(st.request_id, old) and bd_engine.import_cache(st.request_id, current)
    assert bd_engine.step([st], [1.0])[0].kind is StepKind.CACHE
    bd_engine.release(st.request_id)


def test_a_bidirectional_request_is_refused_by_a_block_causal_engine(bd_engine, tiny_engine):
    st = tiny_engine.new_request("list : a b", 32)
    (res,) = bd_engine.step([st], [0.9])
    assert res.error and "bidirectional" in res.error and st.steps_done == 0
    with pytest.raises(ValueError, match="same checkpoint"):
        bd_engine.restore(st.to_bytes())
