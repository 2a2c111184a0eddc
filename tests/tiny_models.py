"""Tiny random checkpoints of the embedded architecture, built by the tests."""

from __future__ import annotations

from pathlib import Path

import torch

from dilaserve.model import DiLaConfig, DiLaForMaskedDiffusion
from dilaserve.model.tokenizer import build_tokenizer


def save_tiny_dila(path: Path, seed: int = 0, **config) -> Path:
    """Save a randomly initialised embedded-architecture checkpoint (with its tokenizer) to
    ``path``: 2 layers of width 32, the task tokenizer's ids; ``config`` overrides any
    :class:`DiLaConfig` field (heads, context, block-causal mode)."""
    tok = build_tokenizer()
    torch.manual_seed(seed)
    fields = dict(
        vocab_size=len(tok),
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
        mask_token_id=tok.mask_token_id,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    DiLaForMaskedDiffusion(DiLaConfig(**{**fields, **config})).save_pretrained(path)
    tok.save_pretrained(path)
    return path
