"""What one step costs a request inside a batch that mixes step kinds.

An instance steps every request it holds together. With the dual cache, the requests
starting a block run a recompute pass over their whole canvases and the others a cache
pass over their blocks; a step that holds both kinds pays for both passes. Requests start
their blocks at different times, so in a busy batch nearly every step carries a recompute
pass. Pricing a request's cache step as ``LP_cache[B x n]`` alone (the paper's remaining
time) then misses the recompute pass its batch-mates trigger: on a 40-request ShareGPT-like
batch that is less than half of the real step latency (docs/architecture.md, "Cost model").

Here each other request of the batch is, independently, on a recompute step with
probability ``f`` (its share of recompute steps: one per block, ``1 / S_c``, with the dual
cache; its prefill alone for a block-causal model) and on a cache step otherwise, which
also feeds its finished block with probability ``a`` (a block-causal append); the expected
latency of a step follows from the two passes' curves.
"""

from __future__ import annotations

from dataclasses import dataclass

from dilaserve.engine.state import StepKind
from dilaserve.profile.types import LatencyProfile


@dataclass(frozen=True)
class StepPrices:
    """Expected seconds of one step of a request: on a cache step, on a recompute step."""

    cache: float
    recompute: float


def mixed_step_prices(
    profile: LatencyProfile,
    tp: int,
    n_requests: int,
    batch_tokens: float,
    own_tokens: float,
    block_length: int,
    recompute_share: float,
    append_share: float = 0.0,
    own_recompute_tokens: float | None = None,
) -> StepPrices:
    """Expected step latencies of one request of a TP-``tp`` batch of ``n_requests``
    requests holding ``batch_tokens`` tokens (both counting the request itself).

    ``recompute_share`` is the probability that another request is on a recompute step,
    ``append_share`` that another request's cache step also feeds its finished block.
    ``own_recompute_tokens`` is what the request's own recompute pass runs (default: its
    ``own_tokens``; a block-causal prefill runs its context only). With no other request,
    the prices are the request's own passes alone.
    """
    others = max(int(n_requests) - 1, 0)
    f = min(max(float(recompute_share), 0.0), 1.0)
    other_tokens = max(float(batch_tokens) - float(own_tokens), 0.0) / others if others else 0.0
    b = float(block_length)
    # Others' recompute pass: runs when at least one of them recomputes (probability p_r),
    # over the tokens of those that do; likewise their cache pass.
    p_r = 1.0 - (1.0 - f) ** others if others else 0.0
    p_c = 1.0 - f**others if others else 0.0
    rec_tokens = others * f * other_tokens
    cac_tokens = others * (1.0 - f) * b * (1.0 + min(max(float(append_share), 0.0), 1.0))
    own_rec = float(own_tokens) if own_recompute_tokens is None else float(own_recompute_tokens)
    rec = profile.curve(tp, StepKind.RECOMPUTE)
    cac = profile.curve(tp, StepKind.CACHE)
    others_rec = p_r * rec(rec_tokens / p_r) if p_r > 0 else 0.0
    others_cac = p_c * cac(cac_tokens / p_c) if p_c > 0 else 0.0
    return StepPrices(
        cache=cac(b + cac_tokens) + others_rec,
        recompute=rec(own_rec + rec_tokens) + others_cac,
    )
