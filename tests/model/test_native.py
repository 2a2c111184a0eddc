"""Native LLaDA and Dream modules, checked on tiny random checkpoints in the published layout."""

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open

from dilaserve.engine import DenoisingEngine, StepKind
from dilaserve.engine.engine import length_groups
from dilaserve.model.adapters import CheckpointError, load_diffusion_lm
from dilaserve.model.make_tiny import TinyShape, make_tiny
from dilaserve.model.native import NativeDiffusionLM, rotary_cos_sin
from dilaserve.model.tensor_parallel import run_tp, shard_model

SHAPES = {
    "llada": TinyShape(layers=2, hidden=32, heads=4, kv_heads=4, intermediate=64),
    "dream": TinyShape(layers=2, hidden=32, heads=4, kv_heads=2, intermediate=64),
}


#: Float32 rounding: a padded or batched pass runs kernels of other shapes, whose reductions
#: round in another order (measured: at most 1.5e-7 apart on these logits), so "exact" here
#: means equal to float32 rounding, and the decoded tokens bit for bit.
FLOAT32 = dict(atol=1e-6, rtol=1e-6)


@pytest.fixture(scope="module", params=["llada", "dream"])
def tiny(request, tmp_path_factory):
    arch = request.param
    return arch, make_tiny(arch, tmp_path_factory.mktemp(f"tiny-{arch}"), SHAPES[arch], seed=3)


def published(path) -> dict[str, torch.Tensor]:
    index = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
    out = {}
    for file in set(index.values()):
        with safe_open(str(path / file), framework="pt") as f:
            out.update({k: f.get_tensor(k) for k in f.keys()})
    return out


def reference(arch: str, path):
    """transformers' own LlamaModel / Qwen2Model holding the published weights, and the head."""
    from transformers import LlamaConfig, LlamaModel, Qwen2Config, Qwen2Model

    cfg, w, s = json.loads((path / "config.json").read_text()), published(path), SHAPES[arch]
    sizes = dict(
        hidden_size=s.hidden,
        intermediate_size=s.intermediate,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads,
        vocab_size=cfg["vocab_size"],
        rope_theta=cfg["rope_theta"],
        rms_norm_eps=cfg["rms_norm_eps"],
        attn_implementation="sdpa",
    )
    if arch == "llada":
        model = LlamaModel(LlamaConfig(attention_bias=False, **sizes))
        p = "model.transformer."
        names = {"embed_tokens.weight": p + "wte.weight", "norm.weight": p + "ln_f.weight"}
        for i in range(s.layers):
            b = f"{p}blocks.{i}."
            names.update(
                {
                    f"layers.{i}.input_layernorm.weight": b + "attn_norm.weight",
                    f"layers.{i}.post_attention_layernorm.weight": b + "ff_norm.weight",
                    f"layers.{i}.self_attn.o_proj.weight": b + "attn_out.weight",
                    f"layers.{i}.mlp.gate_proj.weight": b + "ff_proj.weight",
                    f"layers.{i}.mlp.up_proj.weight": b + "up_proj.weight",
                    f"layers.{i}.mlp.down_proj.weight": b + "ff_out.weight",
                    **{f"layers.{i}.self_attn.{x}_proj.weight": f"{b}{x}_proj.weight" for x in "qkv"},
                }
            )
        head = w[p + "ff_out.weight"].float()
    else:
        model = Qwen2Model(Qwen2Config(**sizes))
        names = {k: "model." + k for k in model.state_dict()}
        head = w["lm_head.weight"].float()
    model.load_state_dict({k: w[v] for k, v in names.items()})
    return model.eval(), head


def test_forward_matches_transformers_with_a_bidirectional_mask(tiny):
    arch, path = tiny
    lm = load_diffusion_lm(path)
    assert isinstance(lm.model, NativeDiffusionLM) and lm.supports_cache
    ref, head = reference(arch, path)
    ids = torch.randint(0, lm.model.spec.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    attn = torch.ones(2, 12, dtype=torch.bool)
    attn[1, 9:] = False  # a padded row
    bidirectional = (attn[:, None, :, None] & attn[:, None, None, :]) | torch.eye(12, dtype=torch.bool)
    with torch.no_grad():
        want = F.linear(ref(ids, attention_mask=bidirectional).last_hidden_state, head)
        got = lm.model(ids, attention_mask=attn).logits
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1, :9], want[1, :9], atol=1e-5, rtol=1e-5)


def test_cache_step_equals_recompute_when_nothing_outside_the_block_changed(tiny):
    _, path = tiny
    lm = load_diffusion_lm(path)
    g = torch.Generator().manual_seed(1)
    T, start, Lb = 20, 8, 8
    ids = torch.randint(0, 1000, (2, T), generator=g)
    attn = torch.ones(2, T, dtype=torch.bool)
    attn[1, 18:] = False
    rows = torch.arange(start, start + Lb).expand(2, Lb)
    want, kv = lm.full(ids, attn, return_kv=True, logit_positions=rows)
    pos = torch.arange(start - lm.lead, start + Lb).expand(2, -1)
    past = [(k.clone(), v.clone()) for k, v in kv]
    got = lm.block(ids.gather(1, pos), pos, past, attn)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # the head on chosen block rows only (a step's masked positions) gives those rows
    some = torch.tensor([[0, 7, 2], [5, 5, 1]])
    picked = lm.block(ids.gather(1, pos), pos, [(k.clone(), v.clone()) for k, v in kv], attn, logit_positions=some)
    torch.testing.assert_close(
        picked, want.gather(1, some[..., None].expand(-1, -1, want.shape[-1])), atol=1e-5, rtol=1e-5
    )
    # and the block's inputs matter: changing one block token changes the block's logits
    changed = ids.clone()
    changed[:, start + 2] += 1
    other = lm.block(changed.gather(1, pos), pos, [(k.clone(), v.clone()) for k, v in kv], attn)
    assert not torch.allclose(other, want)


def test_dream_predicts_token_i_from_position_i_minus_1(tiny):
    arch, path = tiny
    lm = load_diffusion_lm(path)
    assert lm.logit_shift is (arch == "dream") and lm.lead == (1 if arch == "dream" else 0)
    ids = torch.randint(0, 1000, (1, 10), generator=torch.Generator().manual_seed(2))
    attn = torch.ones_like(ids, dtype=torch.bool)
    raw = lm.model(ids, attention_mask=attn).logits
    rows = torch.arange(4, 8)[None]
    got, _ = lm.full(ids, attn, return_kv=False, logit_positions=rows)
    torch.testing.assert_close(got, raw[:, 3:7] if arch == "dream" else raw[:, 4:8])


def test_a_mixed_batch_decodes_each_request_as_it_would_alone(tiny):
    _, path = tiny
    engine = DenoisingEngine(load_diffusion_lm(path))
    # short blocks: a random model commits one token per step
    prompts, lengths = ["list : c a f", "pairs : k q z z y", "arith : 3 + 4"], [8, 16, 8]
    together = engine.generate(prompts, threshold=0.5, gen_length=lengths, block_length=4)
    for prompt, n, got in zip(prompts, lengths, together):
        alone = engine.generate([prompt], threshold=0.5, gen_length=n, block_length=4)[0]
        assert got.token_ids == alone.token_ids and got.steps == alone.steps
    assert max(g.steps for g in together) > max(g.recompute_steps for g in together)  # cache steps ran


def _padded(seqs: list[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and their attention mask, as the engine lays out a recompute batch."""
    T = max(s.numel() for s in seqs)
    ids = torch.full((len(seqs), T), pad_id)
    attn = torch.zeros(len(seqs), T, dtype=torch.bool)
    for j, s in enumerate(seqs):
        ids[j, : s.numel()], attn[j, : s.numel()] = s, True
    return ids, attn


def test_a_padded_batch_of_mixed_prompt_lengths_equals_each_request_alone(tiny):
    _, path = tiny
    lm = load_diffusion_lm(path)
    g = torch.Generator().manual_seed(6)
    prompts, gen, Lb = [7, 13, 10], 8, 4
    seqs = [torch.randint(0, 1000, (n + gen,), generator=g) for n in prompts]
    ids, attn = _padded(seqs, lm.pad_id)
    start = torch.tensor(prompts) + Lb  # each request's second block
    rows = start[:, None] + torch.arange(Lb)
    # recompute: the block's logits and every real position's K/V
    logits, kv = lm.full(ids, attn, return_kv=True, logit_positions=rows)
    pos = start[:, None] - lm.lead + torch.arange(lm.lead + Lb)
    # cache step over the padded caches (the batch's S is the longest canvas)
    stepped = lm.block(ids.gather(1, pos), pos, [(k.clone(), v.clone()) for k, v in kv], attn)
    for j, seq in enumerate(seqs):
        n, one = seq.numel(), torch.ones(1, seq.numel(), dtype=torch.bool)
        alone, kv_alone = lm.full(seq[None], one, return_kv=True, logit_positions=rows[j : j + 1])
        torch.testing.assert_close(logits[j], alone[0], **FLOAT32)
        for (k, v), (ka, va) in zip(kv, kv_alone):
            torch.testing.assert_close(k[j, :, :n], ka[0], **FLOAT32)
            torch.testing.assert_close(v[j, :, :n], va[0], **FLOAT32)
        step_alone = lm.block(seq[None].gather(1, pos[j : j + 1]), pos[j : j + 1], kv_alone, one)
        torch.testing.assert_close(stepped[j], step_alone[0], **FLOAT32)


def test_engine_steps_of_a_padded_batch_equal_each_request_stepped_alone(tiny):
    _, path = tiny
    engine = DenoisingEngine(load_diffusion_lm(path))
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 1000, (n,), generator=g).tolist() for n in (6, 11, 9)]
    batch = [engine.new_request(p, 16, block_length=4) for p in prompts]
    alone = [engine.new_request(p, 16, block_length=4) for p in prompts]
    # the three canvases pad into one recompute pass (not split by length)
    assert len(length_groups([0, 1, 2], [s.context_tokens for s in batch])) == 1
    kinds = set()
    while not all(s.finished for s in batch):
        live = [j for j, s in enumerate(batch) if not s.finished]
        together = engine.step([batch[j] for j in live], [0.5] * len(live))
        for j, res in zip(live, together):
            (single,) = engine.step([alone[j]], [0.5])
            assert res.kind is single.kind and res.committed == single.committed
            kinds.add(res.kind)
            assert (batch[j].response == alone[j].response).all()
            torch.testing.assert_close(torch.from_numpy(batch[j].conf_stats), torch.from_numpy(alone[j].conf_stats))
    assert kinds == {StepKind.RECOMPUTE, StepKind.CACHE}
    assert all(a.finished for a in alone)


def _rotated_k_of_layer0(lm, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer 0's K as the model returns it, and the same K before its rotation."""
    attn = torch.ones_like(ids, dtype=torch.bool)
    kv = lm.model(ids, attention_mask=attn, return_kv=True).kv
    layer = lm.model.layers[0].attn
    spec = lm.model.spec
    x = lm.model.layers[0].ln1(lm.model.embed(ids))
    D = spec.head_dim
    k = layer.qkv(x).split((spec.num_heads * D, spec.num_kv_heads * D, spec.num_kv_heads * D), dim=-1)[1]
    return kv[0][0], k.view(*ids.shape, spec.num_kv_heads, D).transpose(1, 2)


def _authors_rotation(t: torch.Tensor, length: int, theta: float, full_precision: bool) -> torch.Tensor:
    """LLaDA's (OLMo's) rotary step: in float32 when ``rope_full_precision``, then cast back;
    else the tables are cast to ``t``'s dtype (Qwen2's and so Dream's rule)."""
    work = t.float() if full_precision else t
    cos, sin = rotary_cos_sin(t.shape[-1], length, theta, t.device)
    cos, sin = cos.to(work.dtype), sin.to(work.dtype)
    half = t.shape[-1] // 2
    return (work * cos + torch.cat((-work[..., half:], work[..., :half]), dim=-1) * sin).to(t.dtype)


def test_bfloat16_rotary_follows_each_familys_precision(tiny):
    arch, path = tiny
    lm = load_diffusion_lm(path, dtype=torch.bfloat16)
    full_precision = arch == "llada"
    assert lm.model.spec.rope_full_precision is full_precision  # LLaDA's config.json says so
    ids = torch.randint(0, 1000, (1, 256), generator=torch.Generator().manual_seed(8))
    got, before = _rotated_k_of_layer0(lm, ids)
    theta = lm.model.spec.rope_theta
    assert torch.equal(got, _authors_rotation(before, 256, theta, full_precision))
    # the two rules do differ in bfloat16, so the check above can tell them apart
    assert not torch.equal(got, _authors_rotation(before, 256, theta, not full_precision))


def test_dream_full_pass_shifts_its_logits_without_logit_positions_too(tiny):
    arch, path = tiny
    lm = load_diffusion_lm(path)
    ids = torch.randint(0, 1000, (1, 10), generator=torch.Generator().manual_seed(9))
    attn = torch.ones_like(ids, dtype=torch.bool)
    raw = lm.model(ids, attention_mask=attn).logits
    every, _ = lm.full(ids, attn, return_kv=False)
    want = torch.cat((raw[:, :1], raw[:, :-1]), dim=1) if arch == "dream" else raw
    torch.testing.assert_close(every, want, rtol=0, atol=0)
    picked, _ = lm.full(ids, attn, return_kv=False, logit_positions=torch.arange(10)[None])
    torch.testing.assert_close(picked, every, **FLOAT32)


def _tp_logits(rank: int, world_size: int, paths: list[str]):
    """Each family's recompute logits and a cache step's, on this rank's shard."""
    out = []
    for path in paths:
        lm = load_diffusion_lm(path)
        shard_model(lm.model, rank, world_size)
        ids = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed(4))
        attn = torch.ones_like(ids, dtype=torch.bool)
        attn[0, 14:] = False
        logits, kv = lm.full(ids, attn, return_kv=True)
        pos = torch.arange(8 - lm.lead, 12).expand(2, -1)
        out.append((logits, lm.block(ids.gather(1, pos), pos, kv, attn)))
    return out


@pytest.mark.integration  # two gloo worker processes
def test_tp2_over_gloo_equals_tp1(tmp_path_factory):
    paths = [str(make_tiny(a, tmp_path_factory.mktemp(f"tp-{a}"), SHAPES[a], seed=5)) for a in ("llada", "dream")]
    want = _tp_logits(0, 1, paths)
    got = run_tp(_tp_logits, 2, paths, timeout_s=240)
    for (wl, wb), (gl, gb) in zip(want, got):
        torch.testing.assert_close(gl, wl, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(gb, wb, atol=1e-5, rtol=1e-4)


def test_sharding_checks_every_dimension_it_splits(tiny):
    _, path = tiny
    lm = load_diffusion_lm(path)
    with pytest.raises(ValueError, match="TP degree 3 must divide"):
        shard_model(lm.model, 0, 3)


def _variant(src, dst, **changes):
    """A folder with ``src``'s files (linked) and a changed config.json."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "config.json":
            (dst / f.name).symlink_to(f)
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_a_folder_that_does_not_match_its_config_names_the_tensors(tiny, tmp_path):
    arch, path = tiny
    key = "n_layers" if arch == "llada" else "num_hidden_layers"
    with pytest.raises(
        CheckpointError, match=r"missing \d+ tensor\(s\): .*blocks\.2\.|missing \d+ tensor\(s\): .*layers\.2\."
    ):
        load_diffusion_lm(_variant(path, tmp_path / "more", **{key: 3}))
    with pytest.raises(CheckpointError, match=r"unexpected \d+ tensor\(s\): .*\.1\."):
        load_diffusion_lm(_variant(path, tmp_path / "fewer", **{key: 1}))


def test_make_tiny_writes_the_published_generation_config(tiny):
    arch, path = tiny
    gen = json.loads((path / "generation_config.json").read_text())
    lm = load_diffusion_lm(path)
    assert (gen["eos_token_id"], gen["pad_token_id"]) == (lm.eos_id, lm.pad_id)
    if arch == "dream":  # Dream's sampler defaults, as published
        assert (gen["alg"], gen["steps"], gen["temperature"]) == ("origin", 512, 0.0)


def test_make_tiny_keeps_the_familys_vocabulary_and_special_ids(tiny):
    arch, path = tiny
    lm = load_diffusion_lm(path)
    want = {"llada": (126464, 126336, 126081), "dream": (152064, 151666, 151643)}[arch]
    assert (lm.model.spec.vocab_size, lm.mask_id, lm.eos_id) == want and lm.pad_id == lm.eos_id
    tok = lm.tokenizer
    assert (tok.mask_token_id, tok.eos_token_id, tok.pad_token_id) == (lm.mask_id, lm.eos_id, lm.pad_id)
    ids = tok("list : c a f", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == "list : c a f".split()
    assert len(tok.convert_ids_to_tokens(list(range(0, want[0], 997)))) == len(range(0, want[0], 997))


def test_a_latency_profile_is_measured_on_the_native_modules(tiny):
    from dilaserve.profile.measure import MeasureConfig, measure_profile

    _, path = tiny
    cfg = MeasureConfig(tp_degrees=(1,), recompute_tokens=(32, 64), cache_tokens=(32, 64), seq_len=64, repeats=1)
    prof = measure_profile(path, cfg)
    assert prof.has(1) and prof.latency(1, 64) > 0
