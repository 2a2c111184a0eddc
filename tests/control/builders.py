"""Small builders shared by the control-plane tests."""

from __future__ import annotations

import numpy as np

from dilaserve.control.request import TrackedRequest
from dilaserve.engine.state import RequestState
from dilaserve.predict.base import StepPredictor
from dilaserve.profile.types import LatencyProfile, StepCurve

MASK, EOS = 1, 2


def make_request(
    rid: str,
    prompt: int = 36,
    gen: int = 64,
    block: int = 32,
    *,
    arrival: float = 0.0,
    slo: float = 10.0,
    priority: int = 0,
    use_cache: bool = True,
    min_threshold: float = 0.0,
    block_causal: bool = False,
) -> TrackedRequest:
    st = RequestState(
        rid,
        np.full(prompt, 5),
        gen_length=gen,
        block_length=block,
        mask_id=MASK,
        eos_id=EOS,
        use_cache=use_cache,
        block_causal=block_causal,
    )
    return TrackedRequest(st, arrival=arrival, deadline=arrival + slo, priority=priority, min_threshold=min_threshold)


def commit(req: TrackedRequest, k: int, threshold: float = 0.9) -> None:
    """Advance a request by one step committing ``k`` tokens of its current block."""
    st = req.state
    pos = np.flatnonzero(st.response[st.block_slice] == MASK)[:k] + st.block_start
    st.apply_step(pos, np.full(len(pos), 7), threshold, st.next_kind, np.full(5, 0.5))
    req.update_state(st)


def linear_profile(per_token: dict[int, float], base: float = 0.01, cache_scale: float = 1.0) -> LatencyProfile:
    """LP[tp][n] = base + per_token[tp] * n over 1..1e6 tokens (cache steps scaled)."""
    pts = (1, 1_000_000)
    rec = {d: StepCurve.from_points((n, base + a * n) for n in pts) for d, a in per_token.items()}
    cac = {d: StepCurve.from_points((n, cache_scale * (base + a * n)) for n in pts) for d, a in per_token.items()}
    return LatencyProfile("linear", rec, cac)


def default_profile() -> LatencyProfile:
    return linear_profile({1: 1e-4, 2: 0.75e-4, 4: 0.45e-4})


class TablePredictor(StepPredictor):
    """Fixed remaining steps per threshold for every request."""

    name = "table"

    def __init__(self, row):
        self.row = np.asarray(row, dtype=float)

    def predict_rows(self, batch):
        return np.tile(self.row, len(batch.request_ids))


def flat_profile(rec=0.1, cache=0.01) -> LatencyProfile:
    return LatencyProfile("flat", {1: StepCurve((1.0,), (rec,))}, {1: StepCurve((1.0,), (cache,))})
