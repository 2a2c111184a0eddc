import pytest
import torch

from dilaserve.model import DiLaConfig, DiLaForMaskedDiffusion
from dilaserve.model.tokenizer import build_tokenizer


@pytest.fixture(scope="session")
def random_checkpoint(tmp_path_factory):
    """A small randomly initialised embedded-architecture checkpoint (4 heads, so TP 1/2/4 divide)."""
    path = tmp_path_factory.mktemp("tp-dila")
    tok = build_tokenizer()
    torch.manual_seed(0)
    cfg = DiLaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        mask_token_id=tok.mask_token_id,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    DiLaForMaskedDiffusion(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path
