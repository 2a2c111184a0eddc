import json

import pytest
import torch

from dilaserve.model import DiLaConfig, DiLaForMaskedDiffusion
from dilaserve.model.calibrate import CalibrateConfig, calibrate, fit_temperature, nll
from dilaserve.model.tokenizer import build_tokenizer
from dilaserve.model.train import load_for_training
from tests.tiny_models import save_tiny_dila


def test_the_fit_recovers_the_temperature_that_drew_the_targets():
    gen = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(20_000, 12, generator=gen)
    for true_t in (0.7, 1.0, 2.0):
        targets = torch.multinomial(torch.softmax(logits / true_t, -1), 1, generator=gen).squeeze(1)
        fitted = fit_temperature(logits, targets)
        assert fitted == pytest.approx(true_t, rel=0.05)
        assert nll(logits, targets, 1 / fitted) <= nll(logits, targets, 1.0)


def test_the_temperature_divides_the_logits_and_keeps_every_top1_token(tmp_path):
    path = save_tiny_dila(tmp_path / "ck", seed=3)
    ids = torch.randint(3, 40, (2, 12))
    plen = torch.tensor([4, 5])
    raw = DiLaForMaskedDiffusion.from_pretrained(path)(ids, prompt_lengths=plen).logits
    hot = DiLaForMaskedDiffusion.from_pretrained(path, logit_temperature=2.0)(ids, prompt_lengths=plen).logits
    assert torch.allclose(hot, raw / 2, atol=1e-6)
    assert torch.equal(hot.argmax(-1), raw.argmax(-1))
    with pytest.raises(ValueError, match="logit_temperature must be positive"):
        DiLaConfig(logit_temperature=0)


def test_calibration_writes_the_config_and_refits_from_the_raw_logits(tmp_path):
    path = save_tiny_dila(tmp_path / "ck", seed=4)
    cfg = CalibrateConfig(checkpoint=str(path), batches=3, batch_size=8, write=True)
    first = calibrate(cfg)
    assert first.temperature > 0 and first.nll_calibrated <= first.nll_uncalibrated
    assert json.loads((path / "config.json").read_text())["logit_temperature"] == first.temperature
    # a second fit sees the same raw logits, not the ones the stored temperature already scaled
    assert calibrate(cfg).temperature == first.temperature
    # and training continues from the raw logits
    assert load_for_training(str(path), build_tokenizer()).config.logit_temperature == 1.0


def test_a_block_causal_checkpoint_is_refused_with_the_reason(tmp_path):
    path = save_tiny_dila(tmp_path / "bd", block_causal=True, block_length=8)
    with pytest.raises(ValueError, match="block-causal"):
        calibrate(CalibrateConfig(checkpoint=str(path), batches=1, batch_size=2))
