"""The step law: how many denoising steps a block takes at each threshold.

A DLM decodes its canvas block by block. At threshold ``c`` a block of ``B`` tokens takes
``S_c`` steps on average (``S_c ~ B / T_c``, ``T_c`` the mean tokens committed per step).
What those steps cost depends on the model's family (``StepLaw.block_causal``):

* bidirectional with the dual cache: exactly one step of each block is a recompute step (it
  starts the block and runs the whole canvas); the other ``S_c - 1`` are cache steps (they
  run the block only);
* block diffusion (block-causal): the prompt and finished blocks are an exact cache, so a
  request has one recompute step in all, its prefill (prompt + finished blocks + current
  block; again after a migration), and every other step is a cache step; the first cache
  step of each later block also feeds the block just finished (its append).

:class:`StepSplit` holds a request's steps split that way, and every capacity and latency
formula of the control plane prices work with it (see ``docs/architecture.md``, control
algorithms): load control's instance capacity, stage 1 of reconfiguration, the nominal
capacity of a static cluster and a request's isolated latency.

The law comes from the recorded step dynamics where they exist (the exact expected steps
per block of their Markov chain, :meth:`~dilaserve.predict.replay.ReplayTable.block_steps`),
else from a per-threshold tokens-per-step or steps-per-token table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only
    from dilaserve.predict.replay import ReplayTable
    from dilaserve.profile.types import StepCurve


@dataclass(frozen=True)
class StepSplit:
    """A request's decoding steps by what they feed, as every cost formula prices them.

    Attributes:
        block_length: tokens per block ``B``.
        request_tokens: tokens the request holds in a batch (prompt + canvas); they bound
            how many requests an instance takes.
        cache_steps: steps that feed the current block (``B`` tokens) against cached K/V.
        recompute_steps: passes over ``recompute_tokens`` (bidirectional: one per block, over
            the whole canvas; block-causal: the prefill, once).
        recompute_tokens: tokens one recompute pass runs.
        appends: cache steps that also feed the block just finished, ``B`` more tokens each
            (block-causal: one per block after the first; bidirectional: none).
    """

    block_length: int
    request_tokens: float
    cache_steps: float
    recompute_steps: float
    recompute_tokens: float
    appends: float = 0.0

    @property
    def work(self) -> float:
        """Token-steps (the unit of request load): ``B`` per cache step and per append, the
        pass's tokens per recompute step."""
        b = float(self.block_length)
        return self.cache_steps * b + self.appends * b + self.recompute_steps * self.recompute_tokens

    @property
    def fed_per_cache_step(self) -> float:
        """Mean tokens a cache step feeds: the block, plus the appends spread over the cache steps."""
        b = float(self.block_length)
        return b + (self.appends * b / self.cache_steps if self.cache_steps > 0 else 0.0)

    def seconds(self, cache: StepCurve, recompute: StepCurve, n=1.0):
        """Seconds to decode ``n`` such requests stepping together (``n`` = 1: alone; an array
        of batch sizes gives one value each): every cache step at ``LP_cache[n x fed]``,
        every recompute step at ``LP_recompute[n x recompute tokens]``."""
        ns = np.atleast_1d(np.asarray(n, dtype=np.float64))
        t = np.zeros_like(ns)
        if self.cache_steps > 0:
            t += self.cache_steps * cache.many(ns * self.fed_per_cache_step)
        if self.recompute_steps > 0:
            t += self.recompute_steps * recompute.many(ns * self.recompute_tokens)
        return float(t[0]) if np.ndim(n) == 0 else t


def step_split(
    steps: float, prompt_tokens: float, gen_tokens: float, block_length: int, block_causal: bool = False
) -> StepSplit:
    """The split of ``steps`` decoding steps of a request (``gen_tokens``: its canvas, whole
    blocks) in the given family; cache steps are never negative."""
    b = int(block_length)
    blocks = float(gen_tokens) / b
    if block_causal:
        recompute, rec_tokens, appends = 1.0, float(prompt_tokens) + b, max(blocks - 1.0, 0.0)
    else:
        recompute, rec_tokens, appends = blocks, float(prompt_tokens) + float(gen_tokens), 0.0
    return StepSplit(
        b, float(prompt_tokens) + float(gen_tokens), max(float(steps) - recompute, 0.0), recompute, rec_tokens, appends
    )


@dataclass(frozen=True)
class StepLaw:
    """Expected steps per block at each recorded threshold, interpolated in between.

    Attributes:
        block_length: tokens per block ``B`` (the served model's block length).
        thresholds: recorded thresholds, strictly increasing.
        steps_per_block: expected steps ``S_c`` to decode one block at each threshold,
            aligned with ``thresholds``; each in ``[1, B]`` (a step commits at least one
            token, and at most the whole block).
        block_causal: the served model's family: False for a bidirectional DLM with the dual
            cache (one recompute step per block), True for block diffusion (one prefill per
            request and a block append; module docstring).
    """

    block_length: int
    thresholds: tuple[float, ...]
    steps_per_block: tuple[float, ...]
    block_causal: bool = False

    def __post_init__(self) -> None:
        thr = tuple(float(t) for t in self.thresholds)
        steps = tuple(float(s) for s in self.steps_per_block)
        object.__setattr__(self, "thresholds", thr)
        object.__setattr__(self, "steps_per_block", steps)
        if self.block_length < 1:
            raise ValueError(
                f"StepLaw.block_length={self.block_length}: give the model's block length in tokens (e.g. 32)"
            )
        if not thr or len(thr) != len(steps):
            raise ValueError(
                f"StepLaw needs one steps-per-block value per threshold: got {len(thr)} "
                f"thresholds and {len(steps)} values"
            )
        if any(b <= a for a, b in zip(thr, thr[1:])):
            raise ValueError(f"StepLaw.thresholds {thr} must be strictly increasing")
        bad = [s for s in steps if not 1.0 <= s <= self.block_length + 1e-9]
        if bad:
            raise ValueError(
                f"StepLaw.steps_per_block {steps} has {bad} outside [1, {self.block_length}]: a block "
                "takes at least one step and at most one per token; check the tokens-per-step table"
            )

    # ------------------------------------------------------------ constructors
    @classmethod
    def one_token_per_step(cls, block_length: int, block_causal: bool = False) -> StepLaw:
        """The original formulation's pattern, ``S = B`` at every threshold (what capacity is
        priced with when no law is known)."""
        return cls(int(block_length), (1.0,), (float(block_length),), block_causal)

    def with_family(self, block_causal: bool) -> StepLaw:
        """The same steps per block, priced as ``block_causal`` (or bidirectional) steps."""
        return replace(self, block_causal=bool(block_causal))

    @classmethod
    def from_replay(cls, table: ReplayTable, block_length: int, thresholds: Iterable[float] | None = None) -> StepLaw:
        """The exact expected steps per block of the recorded dynamics, at ``thresholds``
        (default: the recorded ones; others take the nearest recorded threshold's value,
        as the replay does)."""
        thr = sorted(float(t) for t in (table.thresholds if thresholds is None else thresholds))
        return cls(int(block_length), tuple(thr), tuple(float(table.block_steps(t, block_length)[0]) for t in thr))

    @classmethod
    def from_dynamics(cls, dynamics, block_length: int, thresholds: Iterable[float] | None = None) -> StepLaw:
        """:meth:`from_replay` over a :class:`~dilaserve.predict.dynamics.StepDynamics`."""
        from dilaserve.predict.replay import ReplayTable

        return cls.from_replay(ReplayTable(dynamics), block_length, thresholds)

    @classmethod
    def from_tokens_per_step(cls, tokens_per_step: Mapping[float, float], block_length: int) -> StepLaw:
        """``S_c = B / T_c``, clipped to ``[1, B]``."""
        if not tokens_per_step:
            raise ValueError("the tokens-per-step table is empty: give T_c for at least one threshold")
        thr = sorted(float(t) for t in tokens_per_step)
        b = int(block_length)
        return cls(b, tuple(thr), tuple(min(float(b), max(1.0, b / float(tokens_per_step[t]))) for t in thr))

    @classmethod
    def from_steps_per_token(cls, steps_per_token: Mapping[float, float], block_length: int) -> StepLaw:
        """``S_c = B x steps per token`` (the threshold-quality table's column), clipped to ``[1, B]``."""
        return cls.from_tokens_per_step({t: 1.0 / s for t, s in steps_per_token.items()}, block_length)

    # ------------------------------------------------------------ queries
    def steps(self, threshold: float) -> float:
        """Expected steps per block at ``threshold`` (linear between recorded thresholds,
        the end values outside them)."""
        return float(np.interp(float(threshold), self.thresholds, self.steps_per_block))

    def cache_steps(self, threshold: float) -> float:
        """Expected cache steps per block of a bidirectional model: every step but the
        block's one recompute step (block-causal requests: :meth:`split`)."""
        return self.steps(threshold) - 1.0

    def split(self, threshold: float, prompt_tokens: float, gen_tokens: float) -> StepSplit:
        """The expected steps of a request of ``prompt_tokens`` and a canvas of ``gen_tokens``
        (whole blocks) at ``threshold``, split by what they feed in this law's family."""
        steps = self.request_steps(gen_tokens, threshold)
        return step_split(steps, prompt_tokens, gen_tokens, self.block_length, self.block_causal)

    def tokens_per_step(self, threshold: float) -> float:
        """Effective ``T_c = B / S_c``: tokens committed per step over whole blocks."""
        return self.block_length / self.steps(threshold)

    def tokens_per_step_at(self, thresholds: Iterable[float]) -> dict[float, float]:
        return {float(t): self.tokens_per_step(t) for t in thresholds}

    def request_steps(self, gen_length: float, threshold: float) -> float:
        """Expected steps of a canvas of ``gen_length`` tokens (whole blocks) at ``threshold``."""
        return gen_length / self.block_length * self.steps(threshold)


#: Steps per output token at each threshold of a typical rollout table of the embedded
#: model. Configs built before any artifact is loaded (the reconfigurator's placeholder
#: ``T_c``, the control benchmark) use it; serving replaces it with the measured law.
TYPICAL_STEPS_PER_TOKEN: dict[float, float] = {0.5: 0.31, 0.6: 0.37, 0.7: 0.45, 0.8: 0.56, 0.9: 0.71}


def typical_tokens_per_step(thresholds: Iterable[float], block_length: int = 32) -> dict[float, float]:
    """``T_c`` of :data:`TYPICAL_STEPS_PER_TOKEN` at ``thresholds`` (interpolated between its
    entries), so a placeholder table always covers the candidate set it is built for."""
    return StepLaw.from_steps_per_token(TYPICAL_STEPS_PER_TOKEN, block_length).tokens_per_step_at(thresholds)
