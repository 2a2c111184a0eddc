import random

import torch

from dilaserve.model import DiLaForMaskedDiffusion
from dilaserve.model.tokenizer import build_tokenizer
from dilaserve.model.train import TrainConfig, build_model, make_batch, masked_diffusion_loss, train, unit_spans
from dilaserve.tasks import TASKS


def test_tokenizer_roundtrip_and_specials(tmp_path):
    tok = build_tokenizer()
    tok.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(tmp_path)
    ids = loaded("arith : 3 + 4 - 2", add_special_tokens=False)["input_ids"]
    assert loaded.convert_ids_to_tokens(ids) == "arith : 3 + 4 - 2".split()
    assert {loaded.mask_token, loaded.pad_token, loaded.eos_token} == {"[MASK]", "[PAD]", "[EOS]"}
    assert len({loaded.mask_token_id, loaded.pad_token_id, loaded.eos_token_id}) == 3


def test_save_and_load_pretrained(tiny_checkpoint):
    m = DiLaForMaskedDiffusion.from_pretrained(tiny_checkpoint)
    assert (tiny_checkpoint / "model.safetensors").exists()
    ids, plen = torch.randint(4, 40, (1, 20)), torch.tensor([8])
    a = m(ids, prompt_lengths=plen).logits
    b = DiLaForMaskedDiffusion.from_pretrained(tiny_checkpoint)(ids, prompt_lengths=plen).logits
    torch.testing.assert_close(a, b)


def test_attention_is_bidirectional(tiny_checkpoint):
    m = DiLaForMaskedDiffusion.from_pretrained(tiny_checkpoint)
    ids, plen = torch.randint(4, 40, (1, 12)), torch.tensor([4])
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % 40 + 4
    assert not torch.allclose(m(ids, prompt_lengths=plen).logits[0, 5], m(changed, prompt_lengths=plen).logits[0, 5]), (
        "response positions see later tokens"
    )


def test_a_forward_without_prompt_lengths_raises_rather_than_return_wrong_logits(tiny_checkpoint):
    """The prompt boundary cannot be read off a canvas, so a plain ``model(input_ids)`` names the fix."""
    import pytest

    m = DiLaForMaskedDiffusion.from_pretrained(tiny_checkpoint)
    ids = torch.randint(4, 40, (2, 12))
    with pytest.raises(ValueError, match="prompt_lengths"):
        m(ids)
    with pytest.raises(ValueError, match=r"one prompt length per row, shape \(2,\)"):
        m(ids, prompt_lengths=torch.tensor([4]))
    # a model trained without isolation has no boundary to find: its plain forward is its forward
    m.config.isolate_prompt = False
    try:
        assert m(ids).logits.shape == (2, 12, m.config.vocab_size)
    finally:
        m.config.isolate_prompt = True


def test_short_training_lowers_the_loss(tmp_path):
    cfg = TrainConfig(
        out=str(tmp_path / "ck"),
        max_steps=40,
        batch_size=16,
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=64,
        warmup_steps=5,
        lr=3e-3,
        max_minutes=2,
        curriculum_steps=10,
    )
    tok = build_tokenizer()
    gen = torch.Generator().manual_seed(5)
    batches = [make_batch([TASKS["list"]], tok, 32, random.Random(i), gen, 1e-3) for i in range(3)]

    def held_out_loss(model):
        with torch.no_grad():
            return sum(
                masked_diffusion_loss(
                    model(b.noisy, attention_mask=b.attention, prompt_lengths=b.prompt_lengths).logits,
                    b.targets,
                    b.masked,
                    b.t,
                    b.gen_length,
                ).item()
                for b in batches
            )

    torch.manual_seed(cfg.seed)
    before = held_out_loss(build_model(cfg, tok))  # the same initial weights train() starts from
    model, log = train(cfg, progress=False)
    after = held_out_loss(model)
    assert after < 0.8 * before
    assert (tmp_path / "ck" / "model.safetensors").exists() and (tmp_path / "ck" / "train_log.json").exists()


def test_extra_eos_blocks_grow_the_canvas_and_keep_the_answer_and_the_loss_scale():
    tok = build_tokenizer()
    gen = torch.Generator().manual_seed(1)
    plain = make_batch([TASKS["list"]], tok, 32, random.Random(4), gen, 0.05)
    grown = make_batch([TASKS["list"]], tok, 32, random.Random(4), gen, 0.05, extra_eos_share=1.0, max_len=256)
    assert plain.gen_length == plain.loss_length == 32
    assert grown.gen_length > 32 and grown.gen_length % 32 == 0 and grown.loss_length == 32
    assert grown.noisy.shape[1] <= 256 and grown.noisy.shape[0] < 32  # fewer rows: about the same tokens
    eos = tok.eos_token_id
    for row, plen in zip(grown.targets, grown.prompt_lengths):
        resp = row[int(plen) : int(plen) + grown.gen_length].tolist()
        first = resp.index(eos)
        assert first <= 10 and set(resp[first:]) == {eos}  # answer, then EOS to the end of the canvas


def test_unit_spans_cover_the_items_and_the_eos_tail():
    assert unit_spans([4, 4], 3, 32) == [(3, 7), (7, 11), (11, 35)]


def test_decode_shaped_masks_leave_whole_items_written_beside_open_ones():
    """The state a threshold decode decides in (all items but one or two written, those open)
    is rare under token-by-token masks and common under decode-shaped ones."""
    tok = build_tokenizer()

    def open_items_by_row(share: float) -> list[int]:
        rng, gen, out = random.Random(3), torch.Generator().manual_seed(3), []
        for _ in range(6):
            b = make_batch([TASKS["pairs"]], tok, 64, rng, gen, 0.05, decode_mask_share=share)
            for masked, target, plen in zip(b.masked, b.targets, b.prompt_lengths):
                assert masked.any() or share == 0  # a decode-shaped sequence always has something to predict
                answer = target[int(plen) : int(plen) + b.gen_length]
                n_items = int((answer != tok.eos_token_id).sum()) // 4  # 4 tokens per item
                items = masked[int(plen) : int(plen) + 4 * n_items].view(n_items, 4).any(dim=1)
                out.append(int(items.sum()) if n_items >= 4 else -1)
        return out

    def share_deciding(rows: list[int]) -> float:
        return sum(r in (1, 2) for r in rows) / sum(r >= 0 for r in rows)

    token, shaped = share_deciding(open_items_by_row(0.0)), share_deciding(open_items_by_row(1.0))
    assert shaped > 3 * token and shaped > 0.2


def test_task_stages_introduce_tasks_in_order():
    cfg = TrainConfig(tasks=["arith", "list", "pairs"], task_stages=["10:list", "30:list+pairs"])
    assert cfg.tasks_at(0) == ["list"] and cfg.tasks_at(9) == ["list"]
    assert cfg.tasks_at(10) == ["list", "pairs"]
    assert cfg.tasks_at(30) == ["arith", "list", "pairs"]


def test_bad_task_stages_say_how_to_write_them():
    import re

    import pytest

    for stages, needle in (
        (["x:list"], "STEP:task+task"),
        (["10:sort"], "STEP:task+task"),
        (["20:list", "10:list+pairs"], "must increase"),
    ):
        with pytest.raises(ValueError, match=re.escape(needle)):
            TrainConfig(task_stages=stages)


def test_isolated_prompt_ignores_the_response(tiny_checkpoint):
    """The prompt's K/V (what the dual cache keeps between recomputes) must not depend on the response."""
    m = DiLaForMaskedDiffusion.from_pretrained(tiny_checkpoint)
    assert m.config.isolate_prompt
    ids = torch.randint(4, 40, (1, 20))
    changed = ids.clone()
    changed[0, 15] = (ids[0, 15] + 1) % 36 + 4
    plen = torch.tensor([10])
    kv_a = m(ids, prompt_lengths=plen, return_kv=True).kv
    kv_b = m(changed, prompt_lengths=plen, return_kv=True).kv
    for (ka, va), (kb, vb) in zip(kv_a, kv_b):
        torch.testing.assert_close(ka[:, :, :10], kb[:, :, :10])
        torch.testing.assert_close(va[:, :, :10], vb[:, :, :10])
    # the response still sees the whole canvas
    assert not torch.allclose(kv_a[-1][0][:, :, 12], kv_b[-1][0][:, :, 12])


def test_continuing_a_checkpoint_grows_its_vocabulary_and_keeps_old_ids(tmp_path):
    """A checkpoint from before the task language gained words keeps every old token's embedding."""
    from dilaserve.model.train import load_for_training

    tok = build_tokenizer()
    cfg = TrainConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    old = build_model(cfg, tok)
    old.resize_token_embeddings(len(tok) - 10)  # as saved before the number words existed
    old.save_pretrained(tmp_path)
    grown = load_for_training(str(tmp_path), tok)
    assert grown.config.vocab_size == len(tok) and grown.embed.weight.shape[0] == len(tok)
    torch.testing.assert_close(grown.embed.weight[: len(tok) - 10], old.embed.weight)
    ids = torch.tensor([tok.convert_tokens_to_ids("arith : + 3 - 2 : four".split())])
    assert grown(ids, prompt_lengths=torch.tensor([ids.shape[1]])).logits.shape == (1, ids.shape[1], len(tok))


def test_a_checkpoint_with_a_larger_vocabulary_is_refused(tmp_path):
    import pytest

    from dilaserve.model.train import load_for_training

    tok = build_tokenizer()
    big = build_model(TrainConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), tok)
    big.resize_token_embeddings(len(tok) + 5)
    big.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="train from scratch"):
        load_for_training(str(tmp_path), tok)
