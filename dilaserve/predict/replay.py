"""Replayed step outcomes: a fast sampler over the recorded step dynamics, and the
expected number of steps they imply.

:class:`~dilaserve.predict.dynamics.StepDynamics` stores every recorded step (tokens
committed, confidence statistics) by threshold and block-progress bucket. Its ``sample``
filters a polars frame per call, which is fine for a notebook and far too slow for a
simulator that replays millions of steps, so :class:`ReplayTable` indexes the same rows
once into numpy pools and draws from them with a plain ``random.Random``.

The same pools define a Markov chain on "tokens already unmasked in the current block",
which gives the exact expected remaining steps of a request at any fixed threshold
(:meth:`ReplayTable.expected_remaining`): the oracle's truth and the isolated latency the
SLO is derived from.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from dilaserve.engine.state import RequestState
from dilaserve.predict.dynamics import StepDynamics, bucket_of
from dilaserve.predict.rollouts import STEP_CONF_COLUMNS


@dataclass(frozen=True)
class _Pool:
    tokens: np.ndarray  # (n,) tokens committed
    conf: np.ndarray  # (n, 5) confidence statistics the step computed

    def __post_init__(self) -> None:
        # What draw() hands out, prepared once: plain ints and one read-only row view per
        # step, instead of a numpy scalar and a new view on every draw.
        object.__setattr__(self, "token_list", self.tokens.tolist())
        rows = self.conf.view()
        rows.flags.writeable = False
        object.__setattr__(self, "conf_rows", list(rows))


class ReplayTable:
    """Recorded step outcomes indexed by (threshold, bucket)."""

    def __init__(self, dynamics: StepDynamics):
        samples = dynamics.samples
        if samples.height == 0:
            raise ValueError("the step dynamics hold no recorded steps: rebuild the step_dynamics artifact")
        self.n_buckets = int(dynamics.n_buckets)
        self.thresholds = np.array(dynamics.thresholds, dtype=np.float64)
        thr = samples["threshold"].to_numpy()
        bucket = samples["bucket"].to_numpy()
        tokens = samples["tokens_committed"].to_numpy().astype(np.int64)
        conf = samples.select(STEP_CONF_COLUMNS).to_numpy().astype(np.float64)
        self._pools: list[list[_Pool]] = []
        for t in self.thresholds:
            at_t = thr == t
            whole = _Pool(tokens[at_t], conf[at_t])
            row = []
            for b in range(self.n_buckets):
                m = at_t & (bucket == b)
                # An empty bucket falls back to the threshold's whole pool (as StepDynamics.sample).
                row.append(_Pool(tokens[m], conf[m]) if m.any() else whole)
            self._pools.append(row)
        self._index: dict[float, int] = {}
        self._expected: dict[tuple[int, int], np.ndarray] = {}

    def index_of(self, threshold: float) -> int:
        """Index of the nearest recorded threshold (memoised: the controller uses few values)."""
        i = self._index.get(threshold)
        if i is None:
            i = int(np.argmin(np.abs(self.thresholds - threshold)))
            self._index[threshold] = i
        return i

    def draw(
        self, threshold: float, unmasked_in_block: int, block_length: int, rng: random.Random
    ) -> tuple[int, np.ndarray]:
        """(tokens committed, confidence statistics) of one replayed step."""
        b = min(unmasked_in_block * self.n_buckets // block_length, self.n_buckets - 1)
        pool = self._pools[self.index_of(threshold)][b]
        j = int(rng.random() * len(pool.token_list))
        return pool.token_list[j], pool.conf_rows[j]

    # ----------------------------------------------------------- expectations
    def block_steps(self, threshold: float, block_length: int) -> np.ndarray:
        """``E[u]``: expected steps to finish a block with ``u`` tokens unmasked, u = 0..B.

        E[B] = 0 and E[u] = 1 + sum_k p(k | bucket(u)) E[min(u + k, B)], solved from
        u = B - 1 down, since every step commits at least one token.
        """
        key = (self.index_of(threshold), int(block_length))
        e = self._expected.get(key)
        if e is None:
            pools = self._pools[key[0]]
            e = np.zeros(block_length + 1)
            for u in range(block_length - 1, -1, -1):
                tokens = pools[int(bucket_of(u / block_length, self.n_buckets))].tokens
                e[u] = 1.0 + e[np.minimum(u + np.maximum(tokens, 1), block_length)].mean()
            self._expected[key] = e
        return e

    def expected_remaining(self, state: RequestState, threshold: float) -> float:
        """Expected steps a request still needs if every later step uses ``threshold``."""
        if state.finished:
            return 0.0
        e = self.block_steps(threshold, state.block_length)
        blocks_after = state.num_blocks - state.block_index - 1
        return float(e[state.unmasked_in_block] + blocks_after * e[0])

    def expected_steps(self, gen_length: int, block_length: int, threshold: float) -> float:
        """Expected steps of a whole request at a fixed threshold."""
        return float(gen_length // block_length * self.block_steps(threshold, block_length)[0])
