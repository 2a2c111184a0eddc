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
* ShareGPT as the paper builds it (``sharegpt-paper``, the paper setting's default): the
  same prompts; each answer is drawn through the output quantiles less half a block, then
  rounded *up* to a whole number of 32-token blocks, so the rounded lengths land on the
  published quantiles (224 / 544 / 928 are whole blocks: the paper's table counts rounded
  answers) with a mean of ~264; a request whose prompt + answer exceeds 4,096 tokens is
  drawn again (the paper's context limit). The shipped ShareGPT file is not used for
  lengths: it holds first-turn prompts only (no answers), filtered to short ones (P50 ~25,
  mean ~80 pieces against the paper's 28 / 140), and the paper's tokenizer is not shipped.
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

#: The paper's ShareGPT answers: whole blocks of this many tokens, and a context limit.
PAPER_OUTPUT_MULTIPLE, PAPER_MAX_TOKENS = 32, 4096
#: Pre-rounding answer lengths: the output knots less half a block, so that rounding up to
#: a whole block lands each published quantile (a multiple of 32) on itself.
SHAREGPT_PAPER_OUTPUT = QuantileLengths(
    tuple((q, max(1.0, v - PAPER_OUTPUT_MULTIPLE / 2)) for q, v in SHAREGPT_OUTPUT.knots)
)

GSM8K_PROMPT_TOKENS = 1020
GSM8K_OUTPUT_TOKENS = 256

LONG_PROMPT_MEDIAN, LONG_PROMPT_SIGMA, LONG_PROMPT_RANGE = 2000.0, 0.35, (512, 4000)
LONG_PROMPT_MAX_OUTPUT = 32

LENGTH_MODELS = ("gsm8k", "sharegpt", "sharegpt-paper", "long-prompt")


def sample_lengths(kind: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens, output tokens) of ``n`` requests of a benchmark-style workload."""
    if kind == "gsm8k":
        return np.full(n, GSM8K_PROMPT_TOKENS), np.full(n, GSM8K_OUTPUT_TOKENS)
    if kind == "sharegpt":
        return SHAREGPT_PROMPT.sample(n, rng), SHAREGPT_OUTPUT.sample(n, rng)
    if kind == "sharegpt-paper":
        return _sharegpt_paper(n, rng)
    if kind == "long-prompt":
        prompt = np.clip(
            np.round(LONG_PROMPT_MEDIAN * np.exp(LONG_PROMPT_SIGMA * rng.standard_normal(n))), *LONG_PROMPT_RANGE
        ).astype(np.int64)
        return prompt, rng.integers(1, LONG_PROMPT_MAX_OUTPUT + 1, n)
    raise ValueError(f"unknown length model {kind!r}: use one of {LENGTH_MODELS}")


def _sharegpt_paper(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """ShareGPT lengths as the paper builds them: answers rounded up to whole 32-token
    blocks, prompt + answer within 4,096 tokens (a longer pair is drawn again)."""
    m = PAPER_OUTPUT_MULTIPLE
    prompt, output = np.empty(n, np.int64), np.empty(n, np.int64)
    todo = np.arange(n)
    while todo.size:
        p = SHAREGPT_PROMPT.sample(todo.size, rng)
        o = -(-SHAREGPT_PAPER_OUTPUT.sample(todo.size, rng) // m) * m
        prompt[todo], output[todo] = p, o
        todo = todo[p + o > PAPER_MAX_TOKENS]
    return prompt, output
