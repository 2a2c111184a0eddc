import math
import random

import numpy as np
import pytest
import torch

from dilaserve.engine import DenoisingEngine, StepKind
from dilaserve.engine.engine import MAX_PADDING, length_groups
from dilaserve.model.adapters import CheckpointError, load_diffusion_lm
from dilaserve.tasks import TASKS, task_suite


def test_a_cache_step_over_an_unchanged_canvas_commits_what_a_recompute_does(tiny_engine):
    """The dual cache a recompute fills is exact until the canvas changes: a cache step from
    the canvas the recompute saw commits the same tokens at the same confidences. Both
    requests are part-way into a block (logits only at the still-masked positions), one in a
    later block beside a shorter neighbour (padding), and a cache step run in between leaves
    the cache as the recompute wrote it."""
    eng = tiny_engine
    batch = [eng.new_request("list : a b c", 32), eng.new_request("arith : + 2 - 1 : three five", 64)]
    while batch[1].block_index == 0:
        eng.step(batch[1:], [math.inf])
    for _ in range(5):
        eng.step(batch, [math.inf, math.inf])
    assert not any(s.finished for s in batch) and all(s.block_cached for s in batch)
    saved = [s.to_bytes() for s in batch]

    def step_saved(cache_ready: bool):
        states = [eng.restore(blob) for blob in saved]  # same request ids: the same caches
        for s in states:
            s.block_cached = cache_ready  # a restored bidirectional request would rebuild its cache
        kinds = [r.kind for r in eng.step(states, [0.9, 0.9])]
        return kinds, states, [(s.response.copy(), s.conf_stats.copy()) for s in states]

    kinds, states, recomputed = step_saved(False)  # refills both caches from the saved canvases
    assert kinds == [StepKind.RECOMPUTE] * 2
    assert [r.kind for r in eng.step(states, [0.9, 0.9])] == [StepKind.CACHE] * 2
    kinds, _, cached = step_saved(True)
    assert kinds == [StepKind.CACHE] * 2
    for (want_ids, want_conf), (got_ids, got_conf) in zip(recomputed, cached):
        np.testing.assert_array_equal(got_ids, want_ids)
        np.testing.assert_allclose(got_conf, want_conf, atol=1e-6, rtol=1e-5)
    for s in batch:
        eng.release(s.request_id)  # the engine is shared by other tests


@pytest.mark.parametrize("seed", range(5))
def test_length_groups_cover_every_request_once_and_bound_padding(seed):
    rng = random.Random(seed)
    lengths = [rng.choice([40, 41, 70, 72, 100, 135, 160]) for _ in range(rng.randint(1, 40))]
    idx = list(range(100, 100 + len(lengths)))
    groups = length_groups(idx, lengths)
    assert sorted(i for g in groups for i in g) == idx
    for g in groups:
        ls = [lengths[i - 100] for i in g]
        assert len(g) * max(ls) - sum(ls) <= MAX_PADDING * len(g) * max(ls)
    assert length_groups(idx, lengths, max_padding=1.0) == [sorted(idx, key=lambda i: -lengths[i - 100])]


def test_length_groups_keep_equal_canvases_together_and_split_far_apart_ones():
    assert length_groups([1, 2, 3], [50, 50, 50]) == [[1, 2, 3]]
    assert length_groups([1, 2, 3], [40, 160, 150]) == [[2, 3], [1]]
    assert length_groups([], []) == []


def test_cache_steps_are_used_inside_a_block(tiny_engine):
    st = tiny_engine.new_request("list : a b c d e f", 32)
    kinds = []
    while not st.finished:
        kinds.append(tiny_engine.step([st], [0.99])[0].kind)
    assert kinds[0] is StepKind.RECOMPUTE
    assert all(k is StepKind.CACHE for k in kinds[1:])
    assert not tiny_engine.has_cache(st.request_id), "finished requests free their cache"


def _decode(engine, states, thresholds):
    active = list(range(len(states)))
    while active:
        engine.step([states[i] for i in active], [thresholds[i] for i in active])
        active = [i for i in active if not states[i].finished]
    return [(engine.decode(s), s.steps_done) for s in states]


def test_request_in_mixed_batch_decodes_as_alone(default_engine):
    suite = task_suite(2, seed=7)
    thresholds = [0.9, 0.5, 0.7, 0.6, 0.8, 0.95]
    together = _decode(default_engine, [default_engine.new_request(x.prompt, x.gen_length) for x in suite], thresholds)
    alone = [
        _decode(default_engine, [default_engine.new_request(x.prompt, x.gen_length)], [t])[0]
        for x, t in zip(suite, thresholds)
    ]
    assert together == alone


@pytest.mark.parametrize("use_cache", [False, True])
def test_migration_roundtrip_continues_identically(default_engine, use_cache):
    inst = next(i for i in task_suite(8, seed=3) if i.gen_length >= 64)
    src, dst = default_engine, DenoisingEngine(default_engine.lm)
    ref = src.new_request(inst.prompt, inst.gen_length, use_cache=use_cache)
    moved = src.new_request(inst.prompt, inst.gen_length, use_cache=use_cache)
    # step both until the moved one is mid-generation; with the cache on, move
    # right before a recompute step (the rule the scheduler follows)
    for _ in range(50):
        src.step([ref, moved], [0.8, 0.8])
        if moved.finished or moved.steps_done >= 3 and (not use_cache or moved.next_kind is StepKind.RECOMPUTE):
            break
    assert not moved.finished and moved.block_index < moved.num_blocks
    blob = moved.to_bytes()
    src.release(moved.request_id)
    restored = dst.restore(blob)
    assert restored.next_kind is StepKind.RECOMPUTE
    while not ref.finished:
        src.step([ref], [0.8])
    while not restored.finished:
        dst.step([restored], [0.8])
    assert src.decode(ref) == dst.decode(restored)
    assert restored.steps_done == ref.steps_done


def test_bad_threshold_fails_alone_and_the_batch_steps_on(tiny_engine):
    good = tiny_engine.new_request("list : a b", 32)
    bad = tiny_engine.new_request("list : c d", 32)
    res = tiny_engine.step([good, bad], [0.9, 1.5])
    assert res[0].error is None and res[0].committed >= 1
    assert "outside (0, 1]" in res[1].error and bad.steps_done == 0
    with pytest.raises(ValueError, match="outside"):
        tiny_engine.generate(["list : a"], threshold=0.0, gen_length=32)


def test_bad_requests_have_actionable_errors(tiny_engine):
    with pytest.raises(ValueError, match="context limit"):
        tiny_engine.new_request("list " * 300, 32)
    with pytest.raises(ValueError, match="does not divide"):
        tiny_engine.new_request("list : a", 48, block_length=32)
    with pytest.raises(ValueError, match="empty"):
        tiny_engine.new_request("", 32)


def test_unknown_and_corrupt_checkpoints(tmp_path, tiny_checkpoint):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_diffusion_lm(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_diffusion_lm(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in tiny_checkpoint.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    (broken / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="could not load"):
        load_diffusion_lm(broken)


def test_sequential_decode_commits_one_token_per_step(tiny_engine):
    st = tiny_engine.new_request("list : a b c", 32)
    while not st.finished:
        assert tiny_engine.step([st], [math.inf])[0].committed == 1
    assert st.tokens_per_step == [1] * st.steps_done
    g = tiny_engine.generate(["list : a b c"], gen_length=32, sequential=True)[0]
    assert g.steps == st.steps_done and all(math.isinf(t) for t in g.thresholds)


def test_lower_threshold_takes_fewer_steps_on_the_default_checkpoint(default_engine):
    from dilaserve.suite_decoding import quality_table

    suite = task_suite(4, seed=11)
    hi, lo = quality_table(default_engine, suite, [0.9, 0.5])
    assert lo.mean_steps < hi.mean_steps
    assert hi.n == lo.n == len(suite)


def test_default_checkpoint_answers_the_list_task_and_pays_for_low_thresholds(default_engine):
    """The committed model is trained: it lists letters correctly at 0.9, and committing at 0.5
    loses answers on the tasks with several valid orders and forms (the trade-off to control)."""
    from dilaserve.suite_decoding import quality_table
    from dilaserve.tasks import get_task

    rng = random.Random(3)
    lists = [get_task("list").sample(rng) for _ in range(12)]
    (hi,) = quality_table(default_engine, lists, [0.9])
    assert hi.accuracy >= 0.8
    suite = task_suite(8, seed=12)
    hi, lo = quality_table(default_engine, suite, [0.9, 0.5])
    assert lo.accuracy < hi.accuracy


@torch.no_grad()
def plain_decode(
    model, prompt_ids: list[int], gen_length: int, block_length: int, mask_id: int, eos_id: int
) -> list[int]:
    """LLaDA's reference decode loop, written against the HF model alone: a full forward per
    step, the most confident masked token of the current block committed (top-k with k = 1),
    no cache; the answer ends at the first EOS, and decoding stops once everything before it
    is committed (the rest of the canvas is padding)."""
    x = torch.tensor([prompt_ids + [mask_id] * gen_length])
    plen = torch.tensor([len(prompt_ids)])
    for b in range(gen_length // block_length):
        lo, hi = len(prompt_ids) + b * block_length, len(prompt_ids) + (b + 1) * block_length
        while (x[0, lo:hi] == mask_id).any():
            logits = model(x, prompt_lengths=plen).logits[0].float()
            logits[:, mask_id] = -math.inf  # the mask token is never an answer
            conf, tok = torch.softmax(logits, dim=-1).max(dim=-1)
            conf[:lo], conf[hi:] = -1.0, -1.0
            conf[x[0] != mask_id] = -1.0
            i = int(conf.argmax())
            x[0, i] = tok[i]
            answer = x[0, len(prompt_ids) :].tolist()
            if eos_id in answer and mask_id not in answer[: answer.index(eos_id)]:
                return answer[: answer.index(eos_id)]
    return x[0, len(prompt_ids) :].tolist()


def test_a_plain_decode_loop_gives_the_engines_one_token_per_step_answers(default_engine):
    """The HF model is usable without the engine: the plain loop over ``model(input_ids,
    prompt_lengths=...)`` reproduces the engine's one-token-per-step decode, token for token,
    in the task's own canvas and in a longer one."""
    lm = default_engine.lm
    rng = random.Random(21)
    for name, canvas in (("list", 1), ("pairs", 2), ("arith", 1)):
        inst = TASKS[name].sample(rng, min(TASKS[name].sizes) + 1)
        ids = default_engine.encode(inst.prompt)
        gen_length = canvas * inst.gen_length
        want = default_engine.generate([inst.prompt], gen_length=gen_length, use_cache=False, sequential=True)[0]
        got = plain_decode(lm.model, ids, gen_length, 32, lm.mask_id, lm.eos_id)
        assert got == want.token_ids, (inst.prompt, default_engine.tokenizer.convert_ids_to_tokens(got), want.text)
