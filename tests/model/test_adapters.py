"""The real-checkpoint path, exercised with a tiny random transformers masked LM."""

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from dilaserve.engine import DenoisingEngine, StepKind
from dilaserve.model.adapters import DiffusionLM, load_diffusion_lm
from dilaserve.model.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def bert_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-bert")
    tok = build_tokenizer()
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        pad_token_id=tok.pad_token_id,
    )
    BertForMaskedLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_hf_masked_lm_loads_and_recomputes_every_step(bert_checkpoint):
    lm = load_diffusion_lm(bert_checkpoint)
    assert not lm.supports_cache and lm.max_context == 128
    assert lm.mask_id == lm.tokenizer.mask_token_id
    engine = DenoisingEngine(lm)
    st = engine.new_request("list : a b c", 32)  # caching is switched off for this model
    assert not st.use_cache
    kinds = []
    while not st.finished:
        kinds.append(engine.step([st], [0.9])[0].kind)
    assert set(kinds) == {StepKind.RECOMPUTE} and st.recompute_steps_done == st.steps_done
    with pytest.raises(ValueError, match="context limit is 128"):
        engine.new_request("list " * 100, 64)


def test_dream_style_logit_shift(bert_checkpoint):
    lm = load_diffusion_lm(bert_checkpoint)
    shifted = DiffusionLM(**{**lm.__dict__, "logit_shift": True})
    ids = torch.randint(4, 40, (2, 10))
    attn = torch.ones_like(ids, dtype=torch.bool)
    plain, _ = lm.full(ids, attn, return_kv=False)
    moved, _ = shifted.full(ids, attn, return_kv=False)
    # token i is predicted from position i-1
    torch.testing.assert_close(moved[:, 1:], plain[:, :-1])
    torch.testing.assert_close(moved[:, 0], plain[:, 0])
