"""Fit a checkpoint's confidence temperature on the states a threshold decode passes through.

    python -m dilaserve.model.calibrate --checkpoint data/models/dila-tiny            # fit, report
    python -m dilaserve.model.calibrate --checkpoint data/models/dila-tiny --write    # and store it

A threshold decode commits a token when the model's top-1 probability clears the threshold, so
those probabilities must mean what they say. A model trained with token-by-token masks is
calibrated on such canvases, but a decode's canvases look different: items are written as
units, and the decisive states are "all items but two written, those two open". A model that
has rarely seen them can be overconfident there, and this tool measures whether it is.

Temperature scaling (one scalar that divides the logits) is the standard correction: it never
changes a top-1 token, only its probability. It cannot remove joint errors (two positions that
are each nearly calibrated but wrong together); decode-shaped training addresses those. The
temperature is the one that minimises the negative
log-likelihood of held-out decode-shaped canvases (``train.decode_shaped_mask``: every item
and the EOS tail written or pending), drawn from the task generators with a seed that no
training run uses. The objective is convex in the inverse temperature, so a golden-section
search finds its minimum. docs/architecture.md, "Confidence calibration", has the numbers.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from dilaserve.model import DiLaForMaskedDiffusion
from dilaserve.model.tokenizer import build_tokenizer
from dilaserve.model.train import make_batch
from dilaserve.tasks import TASKS
from dilaserve.utils.cli import option, parse_dataclass

#: Inverse temperatures the search brackets (temperatures 0.2 to 10).
BETA_RANGE = (0.1, 5.0)


@dataclass
class CalibrateConfig:
    """What to calibrate and on how many canvases (each is a ``--kebab-case`` flag)."""

    checkpoint: str = option("data/models/dila-tiny", "checkpoint folder (bidirectional DiLa model)")
    batches: int = option(60, "held-out decode-shaped batches to fit on, one task and canvas length each")
    batch_size: int = option(32, "canvases per batch")
    extra_eos_share: float = option(0.5, "share of batches with extra [EOS] blocks, as in training")
    seed: int = option(20_241, "seed of the held-out canvases (no training run uses it)")
    write: bool = option(False, "write the fitted temperature into the checkpoint's config.json")

    def __post_init__(self) -> None:
        if self.batches < 1 or self.batch_size < 1:
            raise ValueError("--batches and --batch-size must be at least 1, e.g. --batches 60")


@dataclass(frozen=True)
class Calibration:
    """The fit's result: the temperature and the held-out NLL before and after."""

    checkpoint: str
    temperature: float
    nll_uncalibrated: float
    nll_calibrated: float
    tokens: int
    batches: int


def decode_shaped_logits(model: DiLaForMaskedDiffusion, cfg: CalibrateConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw logits (temperature 1) and targets at the masked positions of held-out canvases."""
    tok = build_tokenizer()
    rng, gen = random.Random(cfg.seed), torch.Generator().manual_seed(cfg.seed)
    tasks = list(TASKS.values())
    saved, model.config.logit_temperature = model.config.logit_temperature, 1.0
    logits, targets = [], []
    try:
        with torch.no_grad():
            for _ in range(cfg.batches):
                b = make_batch(
                    tasks,
                    tok,
                    cfg.batch_size,
                    rng,
                    gen,
                    eps=0.05,
                    extra_eos_share=cfg.extra_eos_share,
                    max_len=model.config.max_position_embeddings,
                    decode_mask_share=1.0,
                )
                out = model(b.noisy, attention_mask=b.attention, prompt_lengths=b.prompt_lengths).logits
                logits.append(out[b.masked])
                targets.append(b.targets[b.masked])
    finally:
        model.config.logit_temperature = saved
    return torch.cat(logits), torch.cat(targets)


def nll(logits: torch.Tensor, targets: torch.Tensor, beta: float) -> float:
    """Mean negative log-likelihood of ``targets`` under ``softmax(beta * logits)``."""
    return F.cross_entropy(logits * beta, targets).item()


def fit_temperature(logits: torch.Tensor, targets: torch.Tensor, iterations: int = 60) -> float:
    """The temperature ``1 / beta`` that minimises the NLL (golden section over ``BETA_RANGE``;
    the NLL is convex in ``beta``: a log-sum-exp minus a linear term)."""
    lo, hi = BETA_RANGE
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = nll(logits, targets, a), nll(logits, targets, b)
    for _ in range(iterations):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = nll(logits, targets, a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = nll(logits, targets, b)
    return 1.0 / ((lo + hi) / 2)


def calibrate(cfg: CalibrateConfig) -> Calibration:
    path = Path(cfg.checkpoint)
    model = DiLaForMaskedDiffusion.from_pretrained(path).eval()
    if model.config.block_causal:
        raise ValueError(
            f"{path} is block-causal; calibration fits bidirectional checkpoints (a block-causal decode "
            "sees one block at a time, and its canvases are not built here)"
        )
    logits, targets = decode_shaped_logits(model, cfg)
    temperature = round(fit_temperature(logits, targets), 3)
    result = Calibration(
        str(path),
        temperature,
        round(nll(logits, targets, 1.0), 5),
        round(nll(logits, targets, 1.0 / temperature), 5),
        int(targets.numel()),
        cfg.batches,
    )
    if cfg.write:
        model.config.logit_temperature = temperature
        model.config.save_pretrained(path)
    return result


def main(argv=None) -> None:
    cfg = parse_dataclass(CalibrateConfig, argv, description=__doc__, prog="python -m dilaserve.model.calibrate")
    print(json.dumps(asdict(calibrate(cfg))))


if __name__ == "__main__":
    main()
