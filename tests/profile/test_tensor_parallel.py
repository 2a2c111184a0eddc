import pytest
import torch

from dilaserve.model.adapters import load_diffusion_lm
from dilaserve.model.tensor_parallel import TPWorker, run_tp, shard_model

BLOCK = slice(8, 16)  # positions fed by the cache step


def _inputs(vocab: int):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (2, 24), generator=g)
    attn = torch.ones(2, 24, dtype=torch.bool)
    attn[1, 20:] = False  # a padded neighbour
    return ids, attn


@torch.no_grad()
def _run(model, vocab: int):
    """Recompute logits, then a cache step over BLOCK attending to the recompute's K/V."""
    ids, attn = _inputs(vocab)
    out = model(ids, attention_mask=attn, return_kv=True, prompt_lengths=torch.tensor([6, 6]))
    past_mask = attn.clone()
    pos = torch.arange(BLOCK.start, BLOCK.stop).expand(2, -1)
    block = model(
        ids[:, BLOCK],
        attention_mask=torch.ones(2, 8, dtype=torch.bool),
        position_ids=pos,
        past_kv=out.kv,
        past_mask=past_mask,
    ).logits
    return out.logits, block


def _sharded(rank: int, world_size: int, checkpoint: str):
    model = TPWorker(checkpoint, rank, world_size, threads=1).load()
    assert model.layers[0].attn.n_head == model.config.num_heads // world_size
    return _run(model, model.config.vocab_size)


@pytest.mark.integration  # two gloo worker processes
def test_tp2_gloo_logits_equal_unsharded(random_checkpoint):
    full = load_diffusion_lm(random_checkpoint).model
    want_logits, want_block = _run(full, full.config.vocab_size)
    got_logits, got_block = run_tp(_sharded, 2, str(random_checkpoint), timeout_s=120)
    torch.testing.assert_close(got_logits, want_logits, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got_block, want_block, atol=1e-5, rtol=1e-4)


def test_shard_model_rejects_degree_that_does_not_divide_heads(random_checkpoint):
    model = load_diffusion_lm(random_checkpoint).model  # 4 heads
    with pytest.raises(ValueError, match="must divide num_heads"):
        shard_model(model, 0, 3)


def test_shard_model_keeps_this_ranks_slice_of_heads(random_checkpoint):
    full = load_diffusion_lm(random_checkpoint).model
    qkv = full.layers[0].attn.qkv.weight.detach().clone()
    shard = shard_model(load_diffusion_lm(random_checkpoint).model, 1, 2)
    hidden = full.config.hidden_size
    # rank 1 of 2 holds the second half of Q's, K's and V's output rows
    want = torch.cat([qkv[i * hidden + hidden // 2 : (i + 1) * hidden] for i in range(3)])
    torch.testing.assert_close(shard.layers[0].attn.qkv.weight, want)
