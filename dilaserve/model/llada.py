"""LLaDA (GSAI-ML/LLaDA-8B-Base, -Instruct): config keys and published tensor names.

LLaDA's code is OLMo's with the causal mask removed. Its config.json uses OLMo's keys
(``d_model``, ``n_heads``, ``n_kv_heads``, ``n_layers``, ``mlp_hidden_size``,
``embedding_size``, ``max_sequence_length``, ``weight_tying``, ...) and its weights sit
under ``model.transformer.``: ``wte`` (embedding), ``blocks.N.{attn_norm, q_proj, k_proj,
v_proj, attn_out, ff_norm, ff_proj, up_proj, ff_out}``, ``ln_f`` and ``ff_out`` (the
untied head). In its LLaMA block ``ff_proj`` is the gate (the SiLU input) and ``up_proj``
the multiplier. The mask token is 126336.
"""

from __future__ import annotations

from .family import Family, WeightMap
from .native import NativeSpec

MASK_ID = 126336
#: <|endoftext|>: the end of an answer and the padding of the canvas after it.
EOS_ID = 126081
VOCAB_SIZE = 126464

PREFIX = "model.transformer."


def _require(config: dict, key: str, expected, why: str) -> None:
    value = config.get(key, expected)
    if value != expected:
        raise ValueError(f"{key}={value!r} is not supported ({why}); LLaDA-8B has {key}={expected!r}")


def spec_from_config(config: dict) -> NativeSpec:
    """The spec of a LLaDA config.json (OLMo keys; LLaMA block, RMSNorm, SiLU, rotary)."""
    _require(config, "block_type", "llama", "only the LLaMA block with split q/k/v is implemented")
    _require(config, "layer_norm_type", "rms", "LLaDA's blocks use RMSNorm")
    _require(config, "activation_type", "silu", "the MLP is SwiGLU with a SiLU gate")
    _require(config, "alibi", False, "positions are rotary")
    _require(config, "rope", True, "positions are rotary")
    _require(config, "attention_layer_norm", False, "no q/k norms are implemented")
    _require(config, "include_bias", False, "only q/k/v may carry a bias")
    _require(config, "scale_logits", False, "the head is unscaled")
    d_model, n_heads = int(config["d_model"]), int(config["n_heads"])
    return NativeSpec(
        family="llada",
        vocab_size=int(config.get("embedding_size") or config["vocab_size"]),
        hidden_size=d_model,
        num_layers=int(config["n_layers"]),
        num_heads=n_heads,
        num_kv_heads=int(config.get("n_kv_heads") or n_heads),
        head_dim=d_model // n_heads,
        intermediate_size=int(config.get("mlp_hidden_size") or config.get("mlp_ratio", 4) * d_model),
        max_position_embeddings=int(config.get("max_sequence_length", 4096)),
        rope_theta=float(config.get("rope_theta", 10000.0)),
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-5)),
        qkv_bias=bool(config.get("include_qkv_bias", False)),
        tie_embeddings=bool(config.get("weight_tying", False)),
        mask_token_id=int(config.get("mask_token_id") or MASK_ID),
        eos_token_id=int(config.get("eos_token_id", EOS_ID)),
        pad_token_id=int(config.get("pad_token_id", config.get("eos_token_id", EOS_ID))),
        logit_shift=False,
        # OLMo's default, and on in LLaDA-8B's config: rotate q and k in float32
        rope_full_precision=bool(config.get("rope_full_precision", True)),
    )


def weight_map(spec: NativeSpec) -> WeightMap:
    names: WeightMap = {"embed.weight": (PREFIX + "wte.weight",), "norm.weight": (PREFIX + "ln_f.weight",)}
    if not spec.tie_embeddings:
        names["head.weight"] = (PREFIX + "ff_out.weight",)
    for i in range(spec.num_layers):
        b, n = f"{PREFIX}blocks.{i}.", f"layers.{i}."
        names[n + "ln1.weight"] = (b + "attn_norm.weight",)
        names[n + "attn.qkv.weight"] = tuple(f"{b}{p}_proj.weight" for p in "qkv")
        if spec.qkv_bias:
            names[n + "attn.qkv.bias"] = tuple(f"{b}{p}_proj.bias" for p in "qkv")
        names[n + "attn.out.weight"] = (b + "attn_out.weight",)
        names[n + "ln2.weight"] = (b + "ff_norm.weight",)
        names[n + "mlp.gate_up.weight"] = (b + "ff_proj.weight", b + "up_proj.weight")
        names[n + "mlp.down.weight"] = (b + "ff_out.weight",)
    return names


FAMILY = Family("llada", ("llada",), MASK_ID, False, spec_from_config, weight_map)
