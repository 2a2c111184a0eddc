"""Write a tiny random LLaDA or Dream checkpoint in the published folder layout.

    python -m dilaserve.model.make_tiny --arch {llada,dream} --out DIR [--layers 8 --hidden 192 ...]

The folder is what the family's authors publish, shrunk: ``config.json`` with the
official keys, ``generation_config.json`` (Dream's with its sampler's published defaults),
the weights under the published tensor names split over two safetensors shards with their
``model.safetensors.index.json``, and a tokenizer. The vocabulary keeps
the family's real size, so the mask, end-of-sequence and padding ids are the family's
(LLaDA 126336 / 126081, Dream 151666 / 151643) and the embedding and head are full-height.
The tokenizer is a small local word-level one: the task language's words take the first
ids, the family's special tokens their real ids, and placeholders fill the rest, so every
id the random model can emit decodes. The weights are random (norm weights too, so a
swapped norm would show), which makes the folder a test and benchmark input, not a model.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from . import dream, llada
from .checkpoint import INDEX, families
from .tokenizer import SPECIAL_TOKENS, VOCAB


@dataclass(frozen=True)
class TinyShape:
    """Sizes of a tiny checkpoint (the vocabulary is always the family's)."""

    layers: int = 8
    hidden: int = 192
    heads: int = 4
    kv_heads: int = 4
    intermediate: int = 576

    def __post_init__(self) -> None:
        if min(self.layers, self.hidden, self.heads, self.kv_heads, self.intermediate) < 1:
            raise ValueError(f"{self}: every size must be positive")
        if self.hidden % self.heads or (self.hidden // self.heads) % 2 or self.heads % self.kv_heads:
            raise ValueError(f"{self}: heads must divide hidden into even head widths, and kv_heads must divide heads")


#: Default shapes, for the engine benchmark: at the real vocabulary a step's head and
#: confidences over 126k-152k entries cost the same with or without the cache, so the
#: layers must be wide enough for the cache's saving to show (8 x 192 measures a dual-cache
#: speedup near 1.8 on CPU at 256 tokens; 4 x 64 layers would measure the head alone).
#: Dream keeps its grouped K/V heads (two queries per K/V head here). Tests pass smaller shapes.
DEFAULT_SHAPES = {"llada": TinyShape(8, 192, 4, 4, 576), "dream": TinyShape(8, 192, 4, 2, 576)}


def llada_config(shape: TinyShape) -> dict:
    """LLaDA-8B-Instruct's config.json with the sizes shrunk."""
    return {
        "activation_type": "silu",
        "alibi": False,
        "alibi_bias_max": 8.0,
        "architectures": ["LLaDAModelLM"],
        "attention_dropout": 0.0,
        "attention_layer_norm": False,
        "attention_layer_norm_with_affine": True,
        "bias_for_layer_norm": False,
        "block_group_size": 1,
        "block_type": "llama",
        "d_model": shape.hidden,
        "embedding_dropout": 0.0,
        "embedding_size": llada.VOCAB_SIZE,
        "eos_token_id": llada.EOS_ID,
        "flash_attention": False,
        "include_bias": False,
        "include_qkv_bias": False,
        "init_device": "meta",
        "init_fn": "mitchell",
        "init_std": 0.02,
        "input_emb_norm": False,
        "layer_norm_type": "rms",
        "layer_norm_with_affine": True,
        "mask_token_id": llada.MASK_ID,
        "max_sequence_length": 4096,
        "mlp_hidden_size": shape.intermediate,
        "mlp_ratio": 4,
        "model_type": "llada",
        "multi_query_attention": None,
        "n_heads": shape.heads,
        "n_kv_heads": shape.kv_heads,
        "n_layers": shape.layers,
        "pad_token_id": llada.EOS_ID,
        "precision": "amp_bf16",
        "residual_dropout": 0.0,
        "rms_norm_eps": 1e-05,
        "rope": True,
        "rope_full_precision": True,
        "rope_theta": 500000.0,
        "scale_logits": False,
        "use_cache": False,
        "vocab_size": llada.VOCAB_SIZE,
        "weight_tying": False,
    }


def dream_config(shape: TinyShape) -> dict:
    """Dream-v0-Instruct-7B's config.json with the sizes shrunk."""
    return {
        "architectures": ["DreamModel"],
        "attention_dropout": 0.0,
        "bos_token_id": dream.EOS_ID,
        "eos_token_id": dream.EOS_ID,
        "hidden_act": "silu",
        "hidden_size": shape.hidden,
        "initializer_range": 0.02,
        "intermediate_size": shape.intermediate,
        "mask_token_id": dream.MASK_ID,
        "max_position_embeddings": 131072,
        "max_window_layers": shape.layers,
        "model_type": "Dream",
        "num_attention_heads": shape.heads,
        "num_hidden_layers": shape.layers,
        "num_key_value_heads": shape.kv_heads,
        "pad_token_id": dream.EOS_ID,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": False,
        "use_sliding_window": False,
        "vocab_size": dream.VOCAB_SIZE,
    }


def generation_config(arch: str) -> dict:
    """The published folder's ``generation_config.json``: the special ids, and for Dream the
    defaults of its own sampler (``diffusion_generate``), which the engine does not read."""
    if arch == "dream":
        return {
            "_from_model_config": True,
            "alg": "origin",
            "alg_temp": None,
            "bos_token_id": dream.EOS_ID,
            "eos_token_id": dream.EOS_ID,
            "eps": 0.001,
            "mask_token_id": None,
            "output_history": False,
            "pad_token_id": dream.EOS_ID,
            "steps": 512,
            "temperature": 0.0,
            "top_k": None,
            "top_p": None,
        }
    return {
        "_from_model_config": True,
        "bos_token_id": SPECIALS["llada"]["<|startoftext|>"],
        "eos_token_id": llada.EOS_ID,
        "pad_token_id": llada.EOS_ID,
    }


#: The family's special tokens at their published ids; the first is the end of sequence.
SPECIALS = {
    "llada": {"<|endoftext|>": 126081, "<|startoftext|>": 126080, "<|mdm_mask|>": 126336, "<|eot_id|>": 126348},
    "dream": {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|mask|>": 151666},
}
MASK_TOKENS = {"llada": "<|mdm_mask|>", "dream": "<|mask|>"}


def tiny_tokenizer(arch: str, vocab_size: int) -> PreTrainedTokenizerFast:
    specials = SPECIALS[arch]
    words = [w for w in VOCAB if w not in SPECIAL_TOKENS]
    ids = iter(i for i in range(vocab_size) if i not in specials.values())
    vocab = {w: next(ids) for w in words}
    unk = "<|unk|>"
    vocab[unk] = next(ids)
    vocab.update({f"<|tiny_{i}|>": i for i in ids})
    vocab.update(specials)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    eos = next(iter(specials))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        mask_token=MASK_TOKENS[arch],
        eos_token=eos,
        pad_token=eos,
        unk_token=unk,
        additional_special_tokens=[t for t in specials if t not in (eos, MASK_TOKENS[arch])],
        clean_up_tokenization_spaces=False,
    )


def random_weights(weight_shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in sorted(weight_shapes.items()):
        if name.endswith("norm.weight") or name.endswith("ln_f.weight") or "layernorm" in name:
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        else:
            t = 0.02 * torch.randn(shape, generator=gen) if len(shape) > 1 else 0.05 * torch.randn(shape, generator=gen)
        out[name] = t.to(torch.bfloat16).contiguous()  # published checkpoints are bfloat16 too
    return out


def published_shapes(arch: str, config: dict) -> dict[str, tuple[int, ...]]:
    """Every published tensor's shape, from the family's own map onto the native modules."""
    from .native import NativeDiffusionLM

    fam = families()[arch]
    spec = fam.spec_from_config(config)
    with torch.device("meta"):
        model = NativeDiffusionLM(spec)
    shapes = {}
    for target, parts in fam.weight_map(spec).items():
        full = tuple(model.get_parameter(target).shape)
        rows = _part_rows(target, spec, len(parts), full[0])
        for name, r in zip(parts, rows):
            shapes[name] = (r, *full[1:])
    return shapes


def _part_rows(target: str, spec, n: int, total: int) -> list[int]:
    if target.endswith("attn.qkv.weight") or target.endswith("attn.qkv.bias"):
        return [spec.num_heads * spec.head_dim] + [spec.num_kv_heads * spec.head_dim] * 2
    return [total // n] * n


def make_tiny(arch: str, out: str | Path, shape: TinyShape | None = None, seed: int = 0) -> Path:
    """Write the tiny ``arch`` checkpoint to ``out`` and return the folder."""
    from safetensors.torch import save_file

    if arch not in SPECIALS:
        raise ValueError(f"--arch {arch!r}: pick one of {sorted(SPECIALS)}")
    shape = shape or DEFAULT_SHAPES[arch]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = (llada_config if arch == "llada" else dream_config)(shape)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(generation_config(arch), indent=2) + "\n")
    weights = random_weights(published_shapes(arch, config), seed)
    # two shards, as a published multi-file checkpoint: the vocabulary-sized tensors, then the layers
    big = {n for n, t in weights.items() if t.shape[0] == config["vocab_size"]}
    shards = {
        "model-00001-of-00002.safetensors": sorted(big),
        "model-00002-of-00002.safetensors": sorted(set(weights) - big),
    }
    for file, names in shards.items():
        save_file({n: weights[n] for n in names}, str(out / file), metadata={"format": "pt"})
    total = sum(t.numel() * t.element_size() for t in weights.values())
    index = {"metadata": {"total_size": total}, "weight_map": {n: f for f, names in shards.items() for n in names}}
    (out / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    tiny_tokenizer(arch, config["vocab_size"]).save_pretrained(out)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dilaserve.model.make_tiny",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--arch", required=True, choices=sorted(SPECIALS))
    p.add_argument("--out", required=True, help="folder to write (created if missing)")
    defaults = TinyShape()
    p.add_argument("--layers", type=int, default=None, help=f"transformer blocks (default {defaults.layers})")
    p.add_argument("--hidden", type=int, default=None, help=f"model width (default {defaults.hidden})")
    p.add_argument("--heads", type=int, default=None, help=f"query heads (default {defaults.heads})")
    p.add_argument("--kv-heads", type=int, default=None, help="K/V heads (default: llada 4, dream 2)")
    p.add_argument("--intermediate", type=int, default=None, help=f"MLP width (default {defaults.intermediate})")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    base = DEFAULT_SHAPES[args.arch]
    given = {
        k: v
        for k, v in {
            "layers": args.layers,
            "hidden": args.hidden,
            "heads": args.heads,
            "kv_heads": args.kv_heads,
            "intermediate": args.intermediate,
        }.items()
        if v is not None
    }
    try:
        shape = TinyShape(**{**base.__dict__, **given})
    except ValueError as e:
        p.error(str(e))
    out = make_tiny(args.arch, args.out, shape, args.seed)
    size = sum(f.stat().st_size for f in out.iterdir()) / 2**20
    print(f"wrote a tiny {args.arch} checkpoint to {out} ({size:.0f} MiB): {shape}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
