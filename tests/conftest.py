"""Shared fixtures: a tiny random model built by the tests, and the embedded default."""

from __future__ import annotations

import pytest
import torch

from dilaserve.engine import DEFAULT_CHECKPOINT, DenoisingEngine
from dilaserve.model import DiLaConfig, DiLaForMaskedDiffusion
from dilaserve.model.adapters import load_diffusion_lm
from dilaserve.model.tokenizer import build_tokenizer


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A randomly initialised embedded-architecture checkpoint saved to a temp folder."""
    path = tmp_path_factory.mktemp("tiny-dila")
    tok = build_tokenizer()
    torch.manual_seed(0)
    cfg = DiLaConfig(
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
    DiLaForMaskedDiffusion(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


#: Block length of :func:`tiny_bd_checkpoint`: short, so a request crosses several blocks.
TINY_BD_BLOCK = 8


@pytest.fixture(scope="session")
def tiny_bd_checkpoint(tmp_path_factory):
    """A randomly initialised block-causal (block-diffusion) checkpoint with 8-token blocks."""
    path = tmp_path_factory.mktemp("tiny-dila-bd")
    tok = build_tokenizer()
    torch.manual_seed(1)
    cfg = DiLaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
        mask_token_id=tok.mask_token_id,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        block_causal=True,
        block_length=TINY_BD_BLOCK,
    )
    DiLaForMaskedDiffusion(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_engine(tiny_checkpoint):
    return DenoisingEngine(load_diffusion_lm(tiny_checkpoint))


@pytest.fixture(scope="session")
def default_engine():
    """The committed default checkpoint (trained, so its predictions are decisive)."""
    return DenoisingEngine.from_pretrained(DEFAULT_CHECKPOINT)
