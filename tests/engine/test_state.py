import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from dilaserve.engine.state import RequestState, StepKind, new_request

MASK, EOS = 1, 2


def make(gen=64, bl=32, cache=True):
    return new_request("r", [10, 11, 12], gen, bl, MASK, EOS, use_cache=cache)


def test_block_advance_and_step_kinds():
    s = make()
    assert s.next_kind is StepKind.RECOMPUTE and s.recompute_left_lower_bound == 2
    s.apply_step(np.arange(0, 16), np.full(16, 20), 0.9, StepKind.RECOMPUTE, np.zeros(5))
    assert s.next_kind is StepKind.CACHE and s.block_index == 0 and s.recompute_left_lower_bound == 1
    s.apply_step(np.arange(16, 32), np.full(16, 21), 0.7, StepKind.CACHE, np.ones(5))
    assert s.block_index == 1 and s.next_kind is StepKind.RECOMPUTE
    assert s.steps_done == 2 and s.recompute_steps_done == 1 and s.thresholds_used == [0.9, 0.7]
    assert s.tokens_per_step == [16, 16]


def test_without_cache_every_step_recomputes():
    s = make(cache=False)
    s.apply_step(np.arange(4), np.full(4, 20), 0.9, StepKind.RECOMPUTE, np.zeros(5))
    assert s.next_kind is StepKind.RECOMPUTE


def test_eos_ends_the_answer_once_prefix_is_committed():
    s = make()
    s.apply_step(np.array([3]), np.array([EOS]), 0.9, StepKind.RECOMPUTE, np.zeros(5))
    assert not s.finished  # positions before the EOS are still masked
    s.apply_step(np.arange(3), np.array([20, 21, 22]), 0.9, StepKind.CACHE, np.zeros(5))
    assert s.finished
    assert (s.response[3:] == EOS).all() and s.answer_ids().tolist() == [20, 21, 22]


def test_finish_reason_is_stop_at_an_eos_and_length_when_the_canvas_fills():
    s = make(gen=32)
    assert s.finish_reason is None
    s.apply_step(np.arange(4), np.array([20, 21, EOS, 22]), 0.9, StepKind.RECOMPUTE, np.zeros(5))
    assert s.finished and s.finish_reason == "stop" and s.answer_ids().tolist() == [20, 21]
    full = make(gen=32)
    full.apply_step(np.arange(32), np.full(32, 20), 0.9, StepKind.RECOMPUTE, np.zeros(5))
    assert full.finished and full.finish_reason == "length" and full.answer_ids().size == 32


def test_max_tokens_caps_the_answer_inside_a_canvas_of_whole_blocks():
    """An OpenAI client's max_tokens: an answer that ends before it stops; one that runs past is cut there."""
    short = new_request("r", [10], 32, 32, MASK, EOS, max_tokens=10)
    short.apply_step(np.arange(32), np.array([20] * 6 + [EOS] * 26), 0.9, StepKind.RECOMPUTE, np.zeros(5))
    assert short.finish_reason == "stop" and short.answer_ids().size == 6
    long = new_request("r", [10], 32, 32, MASK, EOS, max_tokens=10)
    long.apply_step(np.arange(32), np.array([20] * 12 + [EOS] * 20), 0.9, StepKind.RECOMPUTE, np.zeros(5))
    assert long.finish_reason == "length" and long.answer_ids().tolist() == [20] * 10
    assert RequestState.from_bytes(long.to_bytes()).max_tokens == 10  # migration keeps the cap
    with pytest.raises(ValueError, match="make gen_length at least max_tokens"):
        new_request("r", [10], 32, 32, MASK, EOS, max_tokens=33)


def test_features_and_serialisation_roundtrip():
    s = make()
    s.apply_step(np.arange(8), np.full(8, 20), 0.8, StepKind.RECOMPUTE, np.array([0.1, 0.2, 0.3, 0.4, 0.5]))
    f = s.progress_features()
    assert f.tolist() == [64, 1 / 64, 8 / 64, 0.0, 8 / 32, 0.1, 0.2, 0.3, 0.4, 0.5]
    blob = s.to_bytes()
    assert len(blob) < 64 * 1024
    r = RequestState.from_bytes(blob)
    assert r.request_id == s.request_id and (r.response == s.response).all() and r.thresholds_used == [0.8]
    assert (r.progress_features() == f).all()


@pytest.mark.parametrize("gen,bl,match", [(50, 32, "does not divide"), (0, 32, "must be positive")])
def test_bad_lengths_explain_the_fix(gen, bl, match):
    with pytest.raises(ValueError, match=match):
        make(gen, bl)


def test_context_limit():
    with pytest.raises(ValueError, match="context limit is 40"):
        new_request("r", list(range(20)), 32, 32, MASK, EOS, max_context=40)


@settings(deadline=None)
@given(hst.lists(hst.floats(0.0, 1.0), min_size=1, max_size=64))
def test_conf_statistics_match_numpy_quantiles(values):
    from dilaserve.engine.state import conf_statistics

    c = np.array(values)
    q = np.quantile(c, [0.0, 0.25, 0.5, 0.75])
    np.testing.assert_allclose(conf_statistics(c), [q[0], q[1], q[2], c.mean(), q[3]], rtol=1e-12, atol=1e-12)


@settings(deadline=None, max_examples=60)
@given(hst.integers(0, 10_000), hst.integers(1, 4), hst.floats(0.0, 0.2))
def test_block_counters_match_a_canvas_scan(seed, blocks, eos_rate):
    """The incremental counters agree with scanning the canvas after every step, and
    after a restore in the middle of a block."""
    rng = np.random.default_rng(seed)
    s = make(gen=16 * blocks, bl=16)
    while not s.finished:
        masked = np.flatnonzero(s.response[s.block_slice] == MASK) + s.block_start
        pick = np.sort(rng.choice(masked, size=int(rng.integers(1, masked.size + 1)), replace=False))
        toks = np.where(rng.random(pick.size) < eos_rate, EOS, 20)
        s.apply_step(pick, toks, 0.9, s.next_kind, np.zeros(5))
        if rng.random() < 0.3:
            s = RequestState.from_bytes(s.to_bytes())
        if not s.finished:
            block = s.response[s.block_slice]
            assert s.unmasked_in_block == np.count_nonzero(block != MASK)
            assert s.num_unmasked == np.count_nonzero(s.response != MASK)
            # an EOS whose prefix is committed would have ended the answer
            eos = np.flatnonzero(block == EOS)
            assert not eos.size or (block[: eos[0]] == MASK).any()
    assert s.num_unmasked == s.gen_length
