"""Request load, remaining time and instance capacity (docs/architecture.md section 5).

Both request load and remaining time split a request's remaining steps into cache steps
and recompute steps when caching is on: each unstarted block needs exactly one recompute
step (cost grows with every token of the request) and the rest are cache steps (cost grows
with the block only). Without caching every step is a recompute step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dilaserve.engine.state import StepKind
from dilaserve.profile.types import LatencyProfile


@dataclass(frozen=True)
class RequestShape:
    """Per-request arrays the load formulas need, aligned with a steps matrix's rows."""

    tokens: np.ndarray  # (m,) prompt + output tokens
    block_length: np.ndarray  # (m,)
    recompute_left: np.ndarray  # (m,) recompute steps still certain (0 without caching)
    use_cache: np.ndarray  # (m,) bool

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
        )


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
    (steps - recompute_left) x B + recompute_left x tokens.
    """
    return split_cost(steps, shape.recompute_left, shape.use_cache, shape.block_length, shape.tokens)


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
    recompute steps cost LP_recompute[inst_tokens].
    """
    lp_r = profile.latency(tp, inst_tokens, StepKind.RECOMPUTE)
    block_tokens = shape.block_length * max(inst_requests, 1)
    lp_c = profile.curve(tp, StepKind.CACHE).many(block_tokens)
    return split_cost(steps, shape.recompute_left, shape.use_cache, lp_c, lp_r)


class CacheStepLatency:
    """``LP_cache[tp][tokens]`` for one token count at a time, memoised.

    Threshold selection needs it per request per event, always at a few values (block
    length x requests in the batch); the value is :meth:`StepCurve.many`'s, as in
    :func:`remaining_time`.
    """

    def __init__(self, profile: LatencyProfile):
        self.profile = profile
        self._memo: dict[tuple[int, float], float] = {}

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
    the sum over instances. With caching, ``n`` requests decode a block in ``S`` steps: one
    recompute step over their ``n x tokens`` and ``S - 1`` cache steps over their ``n x B``
    (the step law, :class:`~dilaserve.control.step_law.StepLaw`), so

        throughput(n) = n ((S - 1) B + tokens) / ((S - 1) LP_cache[n B] + LP_recompute[n tokens])

    in the units of :func:`request_load`, maximised over ``n`` up to the batch limit.
    """

    def __init__(self, profile: LatencyProfile, grid: int = 64):
        self.profile = profile
        self.grid = grid
        self._memo: dict[tuple, float] = {}

    def throughput(
        self, tp: int, max_batch_tokens: int, cache: tuple[int, int] | None = None, steps_per_block: float | None = None
    ) -> float:
        """``cache`` is ``(block_length, mean request tokens)`` when caching is on;
        ``steps_per_block`` is ``S`` at the threshold capacity is priced at (None: ``B``, one
        token per step, the paper's pattern, which overstates capacity whenever a step
        commits more than one token)."""
        spb = None if cache is None else float(cache[0] if steps_per_block is None else steps_per_block)
        key = (tp, int(max_batch_tokens), cache, spb)
        if key not in self._memo:
            self._memo[key] = self._compute(tp, int(max_batch_tokens), cache, spb)
        return self._memo[key]

    def _compute(self, tp: int, max_batch: int, cache: tuple[int, int] | None, spb: float | None) -> float:
        rec = self.profile.curve(tp, StepKind.RECOMPUTE)
        if cache is None:
            # Every step a recompute step. b / LP(b) is monotone on each linear segment, so
            # its maximum lies on a measured point or at the batch limit.
            cand = np.array([b for b in rec.tokens if b <= max_batch] + [max_batch], dtype=float)
            return float(np.max(cand / rec.many(cand)))
        # Block pattern: (S - 1) cache steps and one recompute step per block, n requests.
        block, req_tokens = cache
        cac = self.profile.curve(tp, StepKind.CACHE)
        n_max = max(1, max_batch // max(req_tokens, 1))
        n = np.unique(np.linspace(1, n_max, num=min(self.grid, n_max)).round())
        b, cache_steps = float(block), max(float(spb) - 1.0, 0.0)
        work = n * (cache_steps * b + req_tokens)
        time = cache_steps * cac.many(n * b) + rec.many(n * req_tokens)
        return float(np.max(work / time))
