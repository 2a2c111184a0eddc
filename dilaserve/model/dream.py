"""Dream (Dream-org/Dream-v0-Base-7B, -Instruct-7B): config keys and published tensor names.

Dream is Qwen2.5-7B trained as a masked-diffusion LM: Qwen2's config keys
(``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``, ...) with
``model_type: Dream``, and Qwen2's tensor names: ``model.embed_tokens``,
``model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
mlp.{gate,up,down}_proj}``, ``model.norm`` and ``lm_head``. q, k and v carry a bias; K/V
heads are grouped (28 query heads share 4). It was initialised from an autoregressive
model and keeps its habit of predicting the *next* token: the logits at position i - 1
are token i's. The mask token is 151666.
"""

from __future__ import annotations

from .family import Family, WeightMap
from .native import NativeSpec

MASK_ID = 151666
#: <|endoftext|>: the end of an answer and Dream's padding.
EOS_ID = 151643
VOCAB_SIZE = 152064


def spec_from_config(config: dict) -> NativeSpec:
    """The spec of a Dream config.json (Qwen2 keys)."""
    if config.get("rope_scaling"):
        raise ValueError(
            f"rope_scaling={config['rope_scaling']!r} is not supported: Dream-7B uses plain rotary positions"
        )
    if config.get("use_sliding_window"):
        raise ValueError("use_sliding_window=true is not supported: Dream attends over the whole canvas")
    if config.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act={config['hidden_act']!r} is not supported: the MLP is SwiGLU with a SiLU gate")
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    eos = int(config.get("eos_token_id", EOS_ID))
    return NativeSpec(
        family="dream",
        vocab_size=int(config["vocab_size"]),
        hidden_size=hidden,
        num_layers=int(config["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads),
        intermediate_size=int(config["intermediate_size"]),
        max_position_embeddings=int(config.get("max_position_embeddings", 32768)),
        rope_theta=float(config.get("rope_theta", 10000.0)),
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        qkv_bias=True,
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
        mask_token_id=int(config.get("mask_token_id") or MASK_ID),
        eos_token_id=eos,
        pad_token_id=int(config.get("pad_token_id") if config.get("pad_token_id") is not None else eos),
        logit_shift=True,
    )


def weight_map(spec: NativeSpec) -> WeightMap:
    names: WeightMap = {"embed.weight": ("model.embed_tokens.weight",), "norm.weight": ("model.norm.weight",)}
    if not spec.tie_embeddings:
        names["head.weight"] = ("lm_head.weight",)
    for i in range(spec.num_layers):
        b, n = f"model.layers.{i}.", f"layers.{i}."
        names[n + "ln1.weight"] = (b + "input_layernorm.weight",)
        names[n + "attn.qkv.weight"] = tuple(f"{b}self_attn.{p}_proj.weight" for p in "qkv")
        names[n + "attn.qkv.bias"] = tuple(f"{b}self_attn.{p}_proj.bias" for p in "qkv")
        names[n + "attn.out.weight"] = (b + "self_attn.o_proj.weight",)
        names[n + "ln2.weight"] = (b + "post_attention_layernorm.weight",)
        names[n + "mlp.gate_up.weight"] = (b + "mlp.gate_proj.weight", b + "mlp.up_proj.weight")
        names[n + "mlp.down.weight"] = (b + "mlp.down_proj.weight",)
    return names


FAMILY = Family("dream", ("dream",), MASK_ID, True, spec_from_config, weight_map)
