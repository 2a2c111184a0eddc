"""The cost model: request load, remaining time and instance capacity (docs/architecture.md
section 5, "Cost model").

Both request load and remaining time split a request's remaining steps into cache steps
and recompute steps when caching is on; the recompute steps still certain are the state's
``recompute_left_lower_bound``. Bidirectional (dual cache): each unstarted block needs
exactly one recompute step (cost grows with every token of the request) and the rest are
cache steps (cost grows with the block only). Block-causal: one recompute step, the prefill
over the request's context, while the request has no cache (on arrival, after a migration),
and each block still to start adds one append of ``B`` tokens to a cache step. Without
caching every step is a recompute step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dilaserve.control.step_law import StepSplit
from dilaserve.engine.state import RequestState, StepKind
from dilaserve.profile.types import LatencyProfile


def appends_left(state: RequestState) -> int:
    """Appends a block-causal request still needs: one per block after the current one,
    plus the finished block whose K/V are still pending (0 for a bidirectional request)."""
    if not state.block_causal or state.finished:
        return 0
    return state.num_blocks - state.block_index - 1 + int(state.append_pending)


def recompute_steps_over_life(state: RequestState) -> int:
    """Recompute steps over the request's whole life, done and certainly left: one per block
    (bidirectional), or its prefill plus one per migration (block-causal)."""
    if state.block_causal:
        return state.recompute_steps_done + state.recompute_left_lower_bound
    return state.num_blocks


@dataclass(frozen=True)
class RequestShape:
    """Per-request arrays the load formulas need, aligned with a steps matrix's rows."""

    tokens: np.ndarray  # (m,) prompt + output tokens
    block_length: np.ndarray  # (m,)
    recompute_left: np.ndarray  # (m,) recompute steps still certain (0 without caching)
    use_cache: np.ndarray  # (m,) bool
    #: (m,) tokens one recompute pass runs: the whole canvas (bidirectional) or the context
    #: up to the current block (block-causal prefill).
    recompute_tokens: np.ndarray = None  # type: ignore[assignment]
    #: (m,) appends still needed (block-causal; 0 otherwise).
    appends: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.recompute_tokens is None:
            object.__setattr__(self, "recompute_tokens", self.tokens)
        if self.appends is None:
            object.__setattr__(self, "appends", np.zeros_like(self.tokens))

    @classmethod
    def of(cls, reqs) -> RequestShape:
        st = [r.state for r in reqs]
        use_cache = np.array([s.use_cache for s in st], dtype=bool)
        rl = np.array([s.recompute_left_lower_bound for s in st], dtype=np.float64)
        return cls(
            tokens=np.array([r.tokens for r in reqs], dtype=np.float64),
            block_length=np.array([s.block_length for s in st], dtype=np.float64),
            recompute_left=np.where(use_cache, rl, 0.0),
            use_cache=use_cache,
            recompute_tokens=np.array([s.context_tokens for s in st], dtype=np.float64),
            appends=np.array([appends_left(s) if s.use_cache else 0 for s in st], dtype=np.float64),
        )

    @property
    def block_causal(self) -> bool:
        """Whether any row appends (a block-causal request with blocks still to start)."""
        return bool(self.appends.any())


def split_cost(
    steps: np.ndarray,
    recompute_left: np.ndarray,
    use_cache: np.ndarray,
    cache_unit: np.ndarray | float,
    recompute_unit: np.ndarray | float,
) -> np.ndarray:
    """``(steps - rl) * cache_unit + rl * recompute_unit`` with caching, else ``steps * recompute_unit``.

    ``steps`` is ``(m, t)``; the rest broadcast per row. A prediction below the recompute
    steps still certain is raised to them: every unstarted block needs its recompute step.
    """
    rl = recompute_left[:, None]
    steps = np.where(use_cache[:, None], np.maximum(steps, rl), steps)
    cu = np.asarray(cache_unit, dtype=np.float64)
    ru = np.asarray(recompute_unit, dtype=np.float64)
    cu = cu[:, None] if cu.ndim else cu
    ru = ru[:, None] if ru.ndim else ru
    cached = (steps - rl) * cu + rl * ru
    return np.where(use_cache[:, None], cached, steps * ru)


def split_cost_one(
    steps: float,
    recompute_left: float,
    use_cache: bool,
    cache_unit: float,
    recompute_unit: float,
) -> float:
    """One entry of :func:`split_cost` in plain Python, the same float operations in the
    same order (so the same number bit for bit): threshold selection prices the few
    requests of one batch per event, where numpy's per-call cost would dominate.
    """
    if not use_cache:
        return steps * recompute_unit
    rl = float(recompute_left)
    return (max(steps, rl) - rl) * cache_unit + rl * recompute_unit


def request_load(steps: np.ndarray, shape: RequestShape) -> np.ndarray:
    """ReqLoad(r, gamma) in token-steps, ``(m, t)``.

    Without caching: steps x (input + output tokens). With caching:
    (steps - recompute_left) x B + recompute_left x recompute tokens + appends x B (the
    :class:`~dilaserve.control.step_law.StepSplit` units; bidirectional: no appends and the
    recompute pass runs every token).
    """
    load = split_cost(steps, shape.recompute_left, shape.use_cache, shape.block_length, shape.recompute_tokens)
    return load + (shape.appends * shape.block_length)[:, None]


def remaining_time(
    steps: np.ndarray,
    shape: RequestShape,
    profile: LatencyProfile,
    tp: int,
    inst_tokens: float,
    inst_requests: int,
) -> np.ndarray:
    """Conservative remaining seconds on a TP-``tp`` instance holding ``inst_tokens`` tokens.

    Cache steps cost LP_cache[B x n_reqs] (the batch feeds one block per request);
    recompute steps cost LP_recompute[inst_tokens]; an append costs what its block adds to
    a cache step, :func:`append_seconds`.
    """
    lp_r = profile.latency(tp, inst_tokens, StepKind.RECOMPUTE)
    block_tokens = shape.block_length * max(inst_requests, 1)
    curve = profile.curve(tp, StepKind.CACHE)
    lp_c = curve.many(block_tokens)
    t = split_cost(steps, shape.recompute_left, shape.use_cache, lp_c, lp_r)
    return t + (shape.appends * (curve.many(block_tokens + shape.block_length) - lp_c))[:, None]


def append_seconds(lp_cache_batch: float, lp_cache_batch_plus_block: float) -> float:
    """What one append adds to its cache step: the step with one more block fed, less the
    step without it (``LP_cache[B (n + 1)] - LP_cache[B n]``)."""
    return max(lp_cache_batch_plus_block - lp_cache_batch, 0.0)


class CacheStepLatency:
    """``LP_cache[tp][tokens]`` for one token count at a time, memoised.

    Threshold selection needs it per request per event, always at a few values (block
    length x requests in the batch); the value is :meth:`StepCurve.many`'s, as in
    :func:`remaining_time`.
    """

    def __init__(self, profile: LatencyProfile):
        self.profile = profile
        self._memo: dict[tuple[int, float], float] = {}

    def forget(self) -> None:
        """Drop the memo (the profile changed)."""
        self._memo.clear()

    def __call__(self, tp: int, tokens: float) -> float:
        key = (tp, tokens)
        lat = self._memo.get(key)
        if lat is None:
            curve = self.profile.curve(tp, StepKind.CACHE)
            lat = self._memo[key] = float(curve.many(np.array([tokens], dtype=np.float64))[0])
        return lat


class CapacityModel:
    """Best token-steps per second of one instance over batch sizes, memoised.

    Capacity over an SLO window is this throughput times the window; cluster capacity is
    the sum over instances. With caching, ``n`` requests of one
    :class:`~dilaserve.control.step_law.StepSplit` (the step law's split at the threshold
    capacity is priced at) decode together, so

        throughput(n) = n work / (cache_steps LP_cache[n fed] + recompute_steps LP_recompute[n tokens])

    in the units of :func:`request_load`, maximised over ``n`` up to the batch limit.
    Bidirectional, per block: ``n ((S - 1) B + tokens) / ((S - 1) LP_cache[n B] +
    LP_recompute[n tokens])``; block-causal: every step a cache step, plus one prefill and
    the appends per request.
    """

    def __init__(self, profile: LatencyProfile, grid: int = 64):
        self.profile = profile
        self.grid = grid
        self._memo: dict[tuple, float] = {}

    def forget(self) -> None:
        """Drop the memo (the profile changed)."""
        self._memo.clear()

    def throughput(self, tp: int, max_batch_tokens: int, split: StepSplit | None = None) -> float:
        """``split`` prices a request's steps when caching is on (None: every step a
        recompute step over the batch)."""
        key = (tp, int(max_batch_tokens), split)
        if key not in self._memo:
            self._memo[key] = self._compute(tp, int(max_batch_tokens), split)
        return self._memo[key]

    def _compute(self, tp: int, max_batch: int, split: StepSplit | None) -> float:
        rec = self.profile.curve(tp, StepKind.RECOMPUTE)
        if split is None:
            # Every step a recompute step. b / LP(b) is monotone on each linear segment, so
            # its maximum lies on a measured point or at the batch limit.
            cand = np.array([b for b in rec.tokens if b <= max_batch] + [max_batch], dtype=float)
            return float(np.max(cand / rec.many(cand)))
        cac = self.profile.curve(tp, StepKind.CACHE)
        n_max = max(1, int(max_batch // max(split.request_tokens, 1.0)))
        n = np.unique(np.linspace(1, n_max, num=min(self.grid, n_max)).round())
        return float(np.max(n * split.work / split.seconds(cac, rec, n)))
