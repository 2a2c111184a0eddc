"""What a move costs when it drops a request's cache, and whether the move repays it.

With the dual cache a request moves right before a recompute step, which rebuilds its
cache anyway: the move is free. A block-causal request has no recompute step after its
prefill, so a move rebuilds its exact cache with one more prefill on the destination
(prompt + finished blocks + current block, :attr:`RequestState.context_tokens`) in place
of the cache step it would have run. That move is worth it only when the steps it has left
run enough faster there to repay the prefill (docs/architecture.md, "Block diffusion").
"""

from __future__ import annotations

from dilaserve.control.predictions import PredictionCache
from dilaserve.control.request import TrackedRequest
from dilaserve.engine.state import StepKind
from dilaserve.profile.types import LatencyProfile


def rebuild_seconds(profile: LatencyProfile, tp: int, req: TrackedRequest) -> float:
    """Seconds a move adds on a TP-``tp`` destination: a recompute pass over the request's
    context instead of a cache step over its block."""
    st = req.state
    rebuild = profile.latency(tp, st.context_tokens, StepKind.RECOMPUTE)
    return max(rebuild - profile.latency(tp, st.block_length, StepKind.CACHE), 0.0)


def steps_left(req: TrackedRequest) -> float:
    """The request's remaining steps at its threshold: the prediction where there is one,
    else its masked tokens at the tokens per step it has committed so far."""
    if req.steps_pred is not None and req.threshold_index >= 0:
        return PredictionCache.steps_left_at(req, req.threshold_index)
    done = req.state.tokens_per_step
    per_step = sum(done) / len(done) if done else 1.0
    return max(req.masked_left / max(per_step, 1.0), 1.0)


def cache_step_seconds(profile: LatencyProfile, tp: int, n_requests: int, block_length: int) -> float:
    """A cache step of a TP-``tp`` batch of ``n_requests`` requests (one block each)."""
    return profile.latency(tp, block_length * max(n_requests, 1), StepKind.CACHE)


def move_pays(profile: LatencyProfile, req: TrackedRequest, src: tuple[int, int], dst: tuple[int, int]) -> bool:
    """Whether moving ``req`` from ``src`` to ``dst`` (each ``(tp, requests in the batch)``,
    the source's counting the request, the destination's not) saves more over its remaining
    steps than the destination's rebuild costs."""
    b = req.state.block_length
    here = cache_step_seconds(profile, src[0], src[1], b)
    there = cache_step_seconds(profile, dst[0], dst[1] + 1, b)
    return steps_left(req) * (here - there) > rebuild_seconds(profile, dst[0], req)
