"""Request lengths for benchmark-style workloads (docs/architecture.md section 6).

* GSM8K-like: prompt 1020 tokens, output 256 tokens (the paper's benchmark setting).
* Long prompt, short answer: prompts around 2,000 tokens (log-normal, P50 2000, clipped to
  512..4000), answers of 1 to 32 tokens (one block), the shape of a code-completion or
  retrieval-augmented service; every block's recompute step then runs the long prompt.
* ShareGPT-like: drawn from a quantile function through the published quantiles
  (prompt avg/P50/P90/P99 = 140/28/344/1698, output 264/224/544/928), interpolated
  linearly in log space between the quantile knots. The end knots (the minimum and maximum
  lengths) are chosen so the means come out right: the output mean is matched (264); the
  prompt mean comes out at ~150 rather than 140, the closest a log-linear quantile function
  through those three quantiles can get (its P50-P90 segment alone carries most of the mean).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class QuantileLengths:
    """Lengths drawn through a monotone quantile function given by knots ``(q, tokens)``."""

    knots: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        qs = [q for q, _ in self.knots]
        vs = [v for _, v in self.knots]
        if qs[0] != 0.0 or qs[-1] != 1.0 or any(b <= a for a, b in zip(qs, qs[1:])):
            raise ValueError(f"quantile knots {self.knots} must run from q=0 to q=1, strictly increasing")
        if any(v < 1 for v in vs) or any(b < a for a, b in zip(vs, vs[1:])):
            raise ValueError(f"quantile knots {self.knots} need lengths >= 1 that never decrease")

    def quantile(self, q: np.ndarray) -> np.ndarray:
        qs = np.array([k[0] for k in self.knots])
        logv = np.log([k[1] for k in self.knots])
        return np.exp(np.interp(q, qs, logv))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.maximum(1, np.round(self.quantile(rng.random(n)))).astype(np.int64)


SHAREGPT_PROMPT = QuantileLengths(((0.0, 1.0), (0.5, 28.0), (0.9, 344.0), (0.99, 1698.0), (1.0, 2048.0)))
SHAREGPT_OUTPUT = QuantileLengths(((0.0, 28.0), (0.5, 224.0), (0.9, 544.0), (0.99, 928.0), (1.0, 1024.0)))

GSM8K_PROMPT_TOKENS = 1020
GSM8K_OUTPUT_TOKENS = 256

LONG_PROMPT_MEDIAN, LONG_PROMPT_SIGMA, LONG_PROMPT_RANGE = 2000.0, 0.35, (512, 4000)
LONG_PROMPT_MAX_OUTPUT = 32

LENGTH_MODELS = ("gsm8k", "sharegpt", "long-prompt")


def sample_lengths(kind: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens, output tokens) of ``n`` requests of a benchmark-style workload."""
    if kind == "gsm8k":
        return np.full(n, GSM8K_PROMPT_TOKENS), np.full(n, GSM8K_OUTPUT_TOKENS)
    if kind == "sharegpt":
        return SHAREGPT_PROMPT.sample(n, rng), SHAREGPT_OUTPUT.sample(n, rng)
    if kind == "long-prompt":
        prompt = np.clip(np.round(LONG_PROMPT_MEDIAN * np.exp(LONG_PROMPT_SIGMA * rng.standard_normal(n))),
                         *LONG_PROMPT_RANGE).astype(np.int64)
        return prompt, rng.integers(1, LONG_PROMPT_MAX_OUTPUT + 1, n)
    raise ValueError(f"unknown length model {kind!r}: use one of {LENGTH_MODELS}")
